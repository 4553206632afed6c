"""Crux scheduling (testbed.schedule.crux): path selection against a brute-force
lexicographic optimum, the two-job link model against hand-worked timelines,
priority compression against exhaustive search, the plan's JSON form, and
the one-line refusals of bad input."""

import itertools
import json
import random

import pytest

from testbed.schedule.crux import plan
from testbed.schedule.crux.compression import (
    Edge,
    compress,
    contention_dag,
    exhaustive_compression,
    split_order,
)
from testbed.schedule.crux.model import Flow, Job, communication_time, intensity, link_bytes
from testbed.schedule.crux.paths import select_paths
from testbed.schedule.crux.priority import FACTOR_FLOOR, assign_priorities, priority_factor, reference_job
from testbed.schedule.crux.shared_link import Periodic, utilization


# --- helpers -----------------------------------------------------------------
def single_flow_job(name, compute_s, size, *paths, overlap=0.0):
    return Job(name, compute_s, (Flow("f", size, tuple(paths)),), overlap)


def cut_of(edges, levels):
    """Weight of edges whose ends are on different levels (recomputed here)."""
    return sum(w for h, lo, w in edges if levels[h] != levels[lo])


def order_respected(edges, levels):
    return all(levels[h] <= levels[lo] for h, lo, _ in edges)


def random_dag(rng, n, links=6, most_links_per_job=3):
    """Jobs with random priorities and random link sets; an edge from the
    higher priority to the lower for every pair sharing a link, weighted by
    a random intensity of the higher job (log-normal: intensities spread over
    orders of magnitude, which makes the choice of cut matter more)."""
    names = [f"j{i}" for i in range(n)]
    priority = {name: rng.random() for name in names}
    used = {name: set(rng.sample(range(links), rng.randint(1, most_links_per_job))) for name in names}
    weight = {name: rng.lognormvariate(0.0, 1.5) for name in names}
    order = sorted(names, key=lambda name: -priority[name])
    edges = [
        (high, low, weight[high])
        for i, high in enumerate(order)
        for low in order[i + 1 :]
        if used[high] & used[low]
    ]
    return order, edges


# --- communication time, intensity -------------------------------------------
def test_link_bytes_adds_flows_per_link():
    a, b = Flow("a", 3.0, (("x",),)), Flow("b", 5.0, (("x",),))
    assert link_bytes([(a, ("x", "y")), (b, ("x", "z"))]) == {"x": 8.0, "y": 3.0, "z": 5.0}


def test_intensity_is_compute_over_busiest_link_time():
    job = Job("j", 6.0, (Flow("a", 100.0, (("x", "y"),)), Flow("b", 50.0, (("y",),))))
    bandwidth = {"x": 100.0, "y": 300.0}
    chosen = {"a": ("x", "y"), "b": ("y",)}
    # x carries 100 B at 100 B/s (1 s); y carries 150 B at 300 B/s (0.5 s).
    assert communication_time(job, chosen, bandwidth) == pytest.approx(1.0)
    assert intensity(job, chosen, bandwidth) == pytest.approx(6.0)


# --- step 1: path selection --------------------------------------------------
@pytest.mark.parametrize("intense, mild", [("a", "b"), ("b", "a")])
def test_more_intense_job_gets_the_emptier_uplink_and_the_other_the_other(intense, mild):
    bandwidth = {"up1": 200.0, "up2": 150.0}
    jobs = [
        single_flow_job(intense, 10.0, 100.0, ("up1",), ("up2",)),
        single_flow_job(mild, 1.0, 100.0, ("up1",), ("up2",)),
    ]
    paths = select_paths(jobs, bandwidth)
    assert paths[intense] == {"f": ("up1",)}
    # up1 would drain 200 B in 1 s, up2 alone drains 100 B in 2/3 s.
    assert paths[mild] == {"f": ("up2",)}
    result = plan(jobs, bandwidth, levels=2)
    assert result.intensities[intense] == pytest.approx(10.0 / 0.5)
    assert result.intensities[mild] == pytest.approx(1.0 / (100.0 / 150.0))
    assert result.edges == []


def test_equal_uplinks_two_jobs_end_on_disjoint_links():
    bandwidth = {"up1": 100.0, "up2": 100.0}
    jobs = [
        single_flow_job("a", 4.0, 100.0, ("tor", "up1"), ("tor", "up2")),
        single_flow_job("b", 2.0, 100.0, ("tor", "up1"), ("tor", "up2")),
    ]
    bandwidth["tor"] = 1000.0
    paths = select_paths(jobs, bandwidth)
    assert {paths["a"]["f"][1], paths["b"]["f"][1]} == {"up1", "up2"}


def test_a_jobs_own_flows_spread_over_parallel_paths():
    bandwidth = {"up1": 100.0, "up2": 100.0}
    job = Job("j", 1.0, (Flow("f1", 100.0, (("up1",), ("up2",))), Flow("f2", 100.0, (("up1",), ("up2",)))))
    chosen = select_paths([job], bandwidth)["j"]
    assert {chosen["f1"], chosen["f2"]} == {("up1",), ("up2",)}
    assert intensity(job, chosen, bandwidth) == pytest.approx(1.0)


def contention_vector(ranked, choice, bandwidth):
    """For each job in rank order: the worst drain time on its path counting
    its own bytes and those of the jobs ranked before it."""
    vector = []
    for k in range(len(ranked)):
        load = {}
        for (_, other_size, _), path in zip(ranked[: k + 1], choice[: k + 1]):
            for link in path:
                load[link] = load.get(link, 0.0) + other_size
        vector.append(max(load[link] / bandwidth[link] for link in choice[k]))
    return vector


def test_greedy_selection_is_the_lexicographic_optimum_on_random_tiny_cases():
    rng = random.Random(7)
    for _ in range(200):
        links = ["l0", "l1", "l2", "l3"]
        bandwidth = {link: rng.uniform(1.0, 10.0) for link in links}
        jobs = []
        for index in range(rng.randint(2, 3)):
            rng.shuffle(links)
            first, second = rng.randint(1, 2), rng.randint(1, 2)
            candidates = (tuple(links[:first]), tuple(links[first : first + second]))
            jobs.append(
                single_flow_job(f"j{index}", rng.uniform(0.5, 5.0), rng.uniform(1.0, 10.0), *candidates)
            )

        # Alone, a one-flow job takes the path with the widest narrowest link.
        def alone_intensity(job, bandwidth=bandwidth):
            flow = job.flows[0]
            return job.compute_s / min(
                flow.bytes / min(bandwidth[link] for link in path) for path in flow.paths
            )

        ranked = [
            (job.name, job.flows[0].bytes, job.flows[0].paths)
            for job in sorted(jobs, key=lambda job: (-alone_intensity(job), job.name))
        ]
        best = min(
            contention_vector(ranked, choice, bandwidth)
            for choice in itertools.product(*(paths for _, _, paths in ranked))
        )
        chosen = select_paths(jobs, bandwidth)
        greedy = [chosen[name]["f"] for name, _, _ in ranked]
        assert contention_vector(ranked, greedy, bandwidth) == pytest.approx(best)


# --- step 2: the two-job link model and k ------------------------------------
def test_example_1_utilizations_and_factor():
    long_job, short_job = Periodic(2.0, 2.0), Periodic(1.0, 1.0)
    # Long first: it runs 2 s of every 4; the short job's traffic then always
    # waits out the long job's 2 s transfer, so it computes 1 s of every 4.
    long_first = utilization(long_job, short_job)
    assert (long_first.first, long_first.second) == pytest.approx((0.5, 0.25))
    assert round(long_first.combined, 3) == 0.375
    # Short first: it runs 1 s of every 2 and the long job's 2 s transfer is
    # split over the short job's compute gaps: 2 s of compute every 6 s.
    short_first = utilization(short_job, long_job)
    assert (short_first.first, short_first.second) == pytest.approx((0.5, 1 / 3))
    assert round(short_first.combined, 3) == 0.417
    assert priority_factor(short_job, long_job) == pytest.approx(1.5)


def test_example_2_overlapped_job_gets_a_smaller_factor():
    reference = Periodic(2.0, 2.0)
    exposed, hidden = Periodic(2.0, 1.0, overlap=0.0), Periodic(2.0, 1.0, overlap=1.0)
    # Exposed job first: it keeps 2 of every 3 s; the reference completes two
    # iterations (4 s and 5 s long) every 9 s.
    first = utilization(exposed, reference)
    assert (first.first, first.second) == pytest.approx((2 / 3, 4 / 9))
    # Reference first: the exposed job's transfer falls in the reference's
    # compute gaps, both run 2 s of every 4.
    second = utilization(reference, exposed)
    assert (second.first, second.second) == pytest.approx((0.5, 0.5))
    # Losses 2/3 - 1/2 = 1/6 and 1/2 - 4/9 = 1/18, intensities 2 and 1.
    assert priority_factor(exposed, reference) == pytest.approx((1 / 6 / 2) / (1 / 18 / 1))
    # Hidden job: its 1 s transfer fits in its 2 s compute even when it waits
    # for the reference, so waiting costs it nothing; the reference loses
    # 1/2 - 1/3 when it waits.
    assert utilization(hidden, reference).second == pytest.approx(1 / 3)
    assert utilization(reference, hidden).second == pytest.approx(1.0)
    assert priority_factor(hidden, reference) == pytest.approx(FACTOR_FLOOR)
    assert priority_factor(hidden, reference) < priority_factor(exposed, reference)


@pytest.mark.parametrize(
    "compute_s, comm_s, overlap",
    [(2.0, 1.0, 0.0), (1.0, 3.0, 0.0), (3.0, 1.0, 1.0), (1.0, 3.0, 1.0), (2.5, 1.5, 0.4)],
)
def test_first_job_runs_as_if_alone(compute_s, comm_s, overlap):
    alone_iteration = max(compute_s + (1 - overlap) * comm_s, comm_s)
    share = utilization(Periodic(compute_s, comm_s, overlap), Periodic(1.3, 0.7, 0.2)).first
    assert share == pytest.approx(compute_s / alone_iteration)


def test_second_job_starves_when_the_first_keeps_the_link_busy():
    # Fully overlapped, 2 s of traffic per 1 s of compute: the link never idles.
    assert utilization(Periodic(1.0, 2.0, 1.0), Periodic(1.0, 1.0)).second == 0.0


def test_priorities_for_example_1_through_bytes_and_bandwidth():
    bandwidth = {"L": 1e9}
    jobs = [single_flow_job("long", 2.0, 2e9, ("L",)), single_flow_job("short", 1.0, 1e9, ("L",))]
    assert reference_job(jobs).name == "long"
    priorities = assign_priorities(jobs, select_paths(jobs, bandwidth), bandwidth)
    assert priorities["long"].factor == 1.0
    assert priorities["long"].value == pytest.approx(1.0)
    assert priorities["short"].factor == pytest.approx(1.5)
    assert priorities["short"].value == pytest.approx(1.5)
    result = plan(jobs, bandwidth, levels=2)
    assert result.reference == "long"
    assert result.order == ["short", "long"]
    assert result.edges == [Edge("short", "long", pytest.approx(1.0))]
    assert result.levels == {"short": 0, "long": 1}
    assert result.cut == pytest.approx(1.0)


# --- step 3: contention DAG and compression ----------------------------------
def test_contention_dag_links_only_jobs_that_share_a_link():
    jobs = [single_flow_job(name, 1.0, 1.0, ("x",)) for name in "abc"]
    chosen = {"a": {"f": ("x",)}, "b": {"f": ("x", "y")}, "c": {"f": ("y",)}}
    edges = contention_dag(jobs, chosen, {"a": 3.0, "b": 2.0, "c": 1.0}, {"a": 10.0, "b": 20.0, "c": 30.0})
    assert edges == [Edge("a", "b", 10.0), Edge("b", "c", 20.0)]
    # Equal priorities: the name decides which is higher.
    tied = contention_dag(jobs, chosen, {"a": 1.0, "b": 1.0, "c": 1.0}, {"a": 10.0, "b": 20.0, "c": 30.0})
    assert tied == [Edge("a", "b", 10.0), Edge("b", "c", 20.0)]


def test_order_constraint_limits_the_cut():
    edges = [("a", "b", 5.0), ("b", "c", 5.0), ("a", "c", 1.0)]
    # {a, c} | {b} would cut 10 but puts c above b against b -> c; the best
    # order-respecting 2-split cuts 5 + 1.
    best = exhaustive_compression(["a", "b", "c"], edges, 2)
    assert best.cut == pytest.approx(6.0)
    assert order_respected(edges, best.levels)
    assert compress(["a", "b", "c"], edges, 2).cut == pytest.approx(6.0)
    assert exhaustive_compression(["a", "b", "c"], edges, 3).cut == pytest.approx(11.0)


def test_one_level_cuts_nothing():
    edges = [("a", "b", 5.0), ("b", "c", 5.0)]
    result = compress(["a", "b", "c"], edges, 1)
    assert result.levels == {"a": 0, "b": 0, "c": 0}
    assert result.cut == 0.0


def test_split_order_is_the_best_split_of_its_order():
    rng = random.Random(3)
    for _ in range(60):
        order, edges = random_dag(rng, rng.randint(2, 7))
        levels = rng.randint(1, 4)
        best = 0.0
        for cuts in range(levels):
            for gaps in itertools.combinations(range(1, len(order)), cuts):
                bounds = (0, *gaps, len(order))
                assignment = {
                    job: block
                    for block in range(len(bounds) - 1)
                    for job in order[bounds[block] : bounds[block + 1]]
                }
                best = max(best, cut_of(edges, assignment))
        result = split_order(order, edges, levels)
        assert result.cut == pytest.approx(best)
        assert cut_of(edges, result.levels) == pytest.approx(result.cut)
        assert max(result.levels.values(), default=0) < levels


def test_compression_on_random_dags_nearly_reaches_the_optimum():
    rng = random.Random(11)
    ratios = {2: [], 3: [], 4: []}
    for levels, found in ratios.items():
        for _ in range(40):
            order, edges = random_dag(rng, rng.randint(3, 7))
            jobs = sorted(order)
            optimum = exhaustive_compression(jobs, edges, levels)
            seed = rng.randrange(2**32)
            result = compress(jobs, edges, levels, samples=10, rng=random.Random(seed))
            assert order_respected(edges, optimum.levels)
            assert order_respected(edges, result.levels)
            assert set(result.levels) == set(jobs)
            assert cut_of(edges, result.levels) == pytest.approx(result.cut)
            assert cut_of(edges, optimum.levels) == pytest.approx(optimum.cut)
            assert result.cut <= optimum.cut + 1e-9
            found.append(result.cut / optimum.cut if optimum.cut else 1.0)
    every = [ratio for found in ratios.values() for ratio in found]
    means = {levels: sum(found) / len(found) for levels, found in ratios.items()}
    assert sum(every) / len(every) >= 0.97, means
    assert min(means.values()) >= 0.97, means


def test_one_order_can_miss_the_optimum_that_sampling_finds():
    edges = [("a", "b", 5.0), ("c", "d", 5.0)]
    # a, b, c, d has one boundary to place and can cut only one edge; putting
    # a and c above b and d cuts both.
    assert split_order(["a", "b", "c", "d"], edges, 2).cut == pytest.approx(5.0)
    assert exhaustive_compression("abcd", edges, 2).cut == pytest.approx(10.0)
    assert compress("abcd", edges, 2, samples=10).cut == pytest.approx(10.0)


def test_more_samples_never_do_worse():
    rng = random.Random(13)
    for _ in range(40):
        order, edges = random_dag(rng, rng.randint(4, 7))
        seed, levels = rng.randrange(2**32), rng.randint(2, 3)
        # Both draws start from the same state, so the longer run sees the
        # shorter run's orders first.
        few = compress(order, edges, levels, samples=1, rng=random.Random(seed))
        many = compress(order, edges, levels, samples=10, rng=random.Random(seed))
        assert many.cut >= few.cut - 1e-9


def test_as_many_levels_as_jobs_cuts_every_edge():
    rng = random.Random(5)
    for _ in range(30):
        order, edges = random_dag(rng, rng.randint(2, 7))
        for levels in (len(order), len(order) + 2):
            result = compress(order, edges, levels, rng=random.Random(1))
            assert result.cut == pytest.approx(sum(w for _, _, w in edges))
            assert order_respected(edges, result.levels)


def test_compression_is_deterministic_for_a_seed():
    order, edges = random_dag(random.Random(9), 7)
    runs = [compress(order, edges, 3, rng=random.Random(42)) for _ in range(2)]
    assert runs[0] == runs[1]


def test_a_cycle_is_refused():
    with pytest.raises(ValueError, match="cycle"):
        compress(["a", "b"], [("a", "b", 1.0), ("b", "a", 1.0)], 2)


# --- the plan ----------------------------------------------------------------
def test_plan_is_json_ready_and_consistent():
    bandwidth = {"up1": 100.0, "up2": 100.0, "core": 150.0}
    jobs = [
        single_flow_job("a", 3.0, 100.0, ("up1", "core"), ("up2",)),
        single_flow_job("b", 2.0, 150.0, ("up1",), ("up2", "core"), overlap=0.5),
        Job("c", 1.0, (Flow("x", 50.0, (("up1",), ("up2",))), Flow("y", 50.0, (("core",),)))),
        single_flow_job("d", 4.0, 80.0, ("core",)),
    ]
    result = plan(jobs, bandwidth, levels=2, seed=3)
    text = json.dumps(result.as_dict(), allow_nan=False)
    assert json.loads(text) == result.as_dict()
    assert result.as_dict()["paths"]["c"]["y"] == ["core"]
    assert set(result.levels) == {"a", "b", "c", "d"}
    assert order_respected(result.edges, result.levels)
    assert result.cut == pytest.approx(cut_of(result.edges, result.levels))
    assert result.reference == "b"
    for name, value in result.priorities.items():
        assert value == pytest.approx(result.factors[name] * result.intensities[name])
    assert result.order == sorted(result.priorities, key=lambda n: (-result.priorities[n], n))
    assert plan(jobs, bandwidth, levels=2, seed=3).as_dict() == result.as_dict()


def test_plan_of_no_jobs_is_empty():
    assert plan([], {}, levels=4).as_dict()["levels"] == {}


# --- refusals ----------------------------------------------------------------
@pytest.mark.parametrize(
    "jobs, bandwidth, message",
    [
        (
            [single_flow_job("a", 1.0, -5.0, ("x",))],
            {"x": 1.0},
            r"job 'a' flow 'f': bytes must be a positive number",
        ),
        (
            [single_flow_job("a", 1.0, 5.0, ("x", "nope"))],
            {"x": 1.0},
            r"job 'a' flow 'f': path \['x', 'nope'\] uses link 'nope', which has no bandwidth",
        ),
        ([Job("a", 1.0, ())], {"x": 1.0}, r"job 'a': expected at least one flow"),
        ([single_flow_job("a", 0.0, 5.0, ("x",))], {"x": 1.0}, r"job 'a': compute_s must be"),
        (
            [single_flow_job("a", 1.0, 5.0, ("x",), overlap=1.5)],
            {"x": 1.0},
            r"job 'a': overlap must be a share between 0 and 1",
        ),
        (
            [Job("a", 1.0, (Flow("f", 5.0, ()),))],
            {"x": 1.0},
            r"job 'a' flow 'f': expected at least one candidate path",
        ),
        ([single_flow_job("a", 1.0, 5.0, ("x",))], {"x": 0.0}, r"link 'x': bandwidth must be"),
        (
            [single_flow_job("a", 1.0, 5.0, ("x",)), single_flow_job("a", 1.0, 5.0, ("x",))],
            {"x": 1.0},
            r"job name 'a' is used twice",
        ),
    ],
)
def test_bad_input_is_refused_on_one_line(jobs, bandwidth, message):
    with pytest.raises(ValueError, match=message) as caught:
        plan(jobs, bandwidth, levels=2)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("levels", [0, -1, 1.5, True])
def test_levels_below_one_are_refused(levels):
    jobs = [single_flow_job("a", 1.0, 5.0, ("x",))]
    with pytest.raises(ValueError, match="levels must be an integer >= 1"):
        plan(jobs, {"x": 1.0}, levels=levels)
    with pytest.raises(ValueError, match="levels must be an integer >= 1"):
        compress(["a"], [], levels)


def test_missing_chosen_path_is_refused():
    job = Job("a", 1.0, (Flow("f", 5.0, (("x",),)), Flow("g", 5.0, (("x",),))))
    with pytest.raises(ValueError, match="job 'a' flow 'g': no path chosen"):
        intensity(job, {"f": ("x",)}, {"x": 1.0})


def test_edge_to_an_unknown_job_is_refused():
    with pytest.raises(ValueError, match="names job 'z'"):
        compress(["a"], [("a", "z", 1.0)], 2)
