"""Validation of topology and scenario files: one readable line per problem."""

import json
import re
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from testbed.cli import main
from testbed.cli.common import INVALID
from testbed.fabric import units
from testbed.fabric.loader import detect_kind, load_yaml
from testbed.fabric.problems import ConfigError, Problem
from testbed.fabric.records import Fault, TrafficFlow
from testbed.fabric.scenario import check_files, load_scenario, load_topology
from testbed.fabric.schema import load_schema

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"

# A valid scenario header; the cases below append their own traffic etc.
HEAD = "name: t\ntopology: {kind: hpn}\nduration: 10\n"
TRAFFIC = "traffic: [{src: s0h0, dst: s1h0}]\n"
REGION = "kind: region\nfabrics: [{kind: hpn}, {kind: hpn, segments: 1}]\n"

# (case id, YAML text, substring of FIELD, substring of the message)
VIA = HEAD + "jobs: [{name: j, hosts: [s0h0, s1h0], collective: ring, bytes: 1GB, paths: via, "

MALFORMED = [
    # --- topology files: schema ---
    (
        "unknown-field",
        "kind: hpn\nsegmets: 2\n",
        "(top)",
        "unknown field 'segmets' (did you mean 'segments'? allowed: kind, segments,",
    ),
    ("kind-missing", "segments: 2\n", "kind", "required field is missing"),
    (
        "kind-unknown",
        "kind: hpnn\n",
        "kind",
        "expected one of 'hpn', 'clos', 'fat-tree', 'region', got 'hpnn'",
    ),
    ("planes-3", "kind: hpn\nplanes: 3\n", "planes", "expected one of 1, 2, got 3"),
    (
        "hosts-0",
        "kind: hpn\nhosts_per_segment: 0\n",
        "hosts_per_segment",
        "expected an integer from 1 to 254, got 0",
    ),
    ("rails-9", "kind: hpn\nrails: 9\n", "rails", "expected an integer from 1 to 8, got 9"),
    ("aggs-0", "kind: hpn\naggs_per_plane: 0\n", "aggs_per_plane", "expected an integer from 1 to 64, got 0"),
    ("dual-tor-text", "kind: hpn\ndual_tor: maybe\n", "dual_tor", "expected true or false, got 'maybe'"),
    ("oversub-0", "kind: hpn\noversubscription: 0\n", "oversubscription", "expected a number > 0, got 0"),
    (
        "rate-no-unit",
        "kind: hpn\nrates: {host: 200G}\n",
        "rates.host",
        "expected a rate such as '200Gbit' or '40Mbit', got '200G'",
    ),
    ("rates-unknown", "kind: hpn\nrates: {hots: 1Gbit}\n", "rates", "unknown field 'hots'"),
    ("mtu-small", "kind: hpn\nmtu: 100\n", "mtu", "expected an integer from 576 to 9216, got 100"),
    ("mtu-float", "kind: hpn\nmtu: 9000.0\n", "mtu", "expected an integer, got 9000.0"),
    ("scale-negative", "kind: clos\nscale: -1\n", "scale", "expected a number > 0, got -1"),
    ("scale-infinite", "kind: clos\nscale: .inf\n", "scale", "expected a number, got inf"),
    ("k-odd", "kind: fat-tree\nk: 3\n", "k", "expected an even integer from 2 to 30, got 3"),
    ("clos-hpn-field", "kind: clos\nsegments: 2\n", "(top)", "unknown field 'segments'"),
    (
        "region-one-fabric",
        "kind: region\nfabrics: [{kind: hpn}]\ndci: {rate: 1Gbit}\n",
        "fabrics",
        "expected a list of at least 2 items, got a list of 1 item",
    ),
    ("region-no-dci", REGION, "dci", "required field is missing"),
    (
        "dci-both",
        REGION + "dci: {rate: 1Gbit, oversubscription: 2}\n",
        "dci",
        "expected exactly one of rate, oversubscription, got both",
    ),
    (
        "dci-neither",
        REGION + "dci: {links: 1}\n",
        "dci",
        "expected exactly one of rate, oversubscription, got neither",
    ),
    (
        "dci-delay-number",
        REGION + "dci: {rate: 1Gbit, delay: 2}\n",
        "dci.delay",
        "expected a duration such as '2ms'",
    ),
    (
        "region-in-region",
        "kind: region\nfabrics: [{kind: hpn}, {kind: region}]\ndci: {rate: 1Gbit}\n",
        "fabrics[1].kind",
        "got 'region'",
    ),
    (
        "fabric-scale",
        "kind: region\nfabrics: [{kind: hpn, scale: 10}, {kind: hpn}]\ndci: {rate: 1Gbit}\n",
        "fabrics[0].scale",
        "scale is set once for the whole region",
    ),
    # --- topology files: model ---
    (
        "two-planes-single-tor",
        "kind: hpn\nplanes: 2\ndual_tor: false\n",
        "planes",
        "two planes need dual_tor: true",
    ),
    (
        "region-plane-mismatch",
        "kind: region\nfabrics: [{kind: hpn}, {kind: clos}]\ndci: {rate: 1Gbit}\n",
        "fabrics",
        "same number of planes",
    ),
    # --- scenario files: schema ---
    (
        "name-uppercase",
        "name: Bad_Name\ntopology: {kind: hpn}\nduration: 10\n" + TRAFFIC,
        "name",
        "expected a name of lowercase letters, digits and '-', got 'Bad_Name'",
    ),
    ("traffic-missing", HEAD, "(top)", "expected at least one of traffic, jobs, probes, got none of them"),
    (
        "traffic-empty",
        HEAD + "traffic: []\n",
        "traffic",
        "expected a list of at least 1 item, got an empty list",
    ),
    (
        "scenario-unknown-field",
        HEAD + TRAFFIC + "fault: []\n",
        "(top)",
        "unknown field 'fault' (did you mean 'faults'?",
    ),
    (
        "inline-topology-schema",
        "name: t\ntopology: {kind: hpn, planes: 3}\nduration: 10\n" + TRAFFIC,
        "topology.planes",
        "expected one of 1, 2, got 3",
    ),
    (
        "topology-number",
        "name: t\ntopology: 5\nduration: 10\n" + TRAFFIC,
        "topology",
        "expected a topology mapping or the path of a topology file, got 5",
    ),
    (
        "duration-zero",
        "name: t\ntopology: {kind: hpn}\nduration: 0\n" + TRAFFIC,
        "duration",
        "expected seconds > 0, got 0",
    ),
    (
        "duration-bad-unit",
        "name: t\ntopology: {kind: hpn}\nduration: 25 sec\n" + TRAFFIC,
        "duration",
        "expected a duration such as '25s'",
    ),
    (
        "traffic-kind",
        HEAD + "traffic: [{kind: ping, src: s0h0, dst: s1h0}]\n",
        "traffic[0].kind",
        "expected one of 'iperf3', got 'ping'",
    ),
    (
        "parallel-17",
        HEAD + "traffic: [{src: s0h0, dst: s1h0, parallel: 17}]\n",
        "traffic[0].parallel",
        "expected an integer from 1 to 16, got 17",
    ),
    (
        "dst-repeated",
        HEAD + "traffic: [{src: s0h0, dst: [s1h0, s1h0]}]\n",
        "traffic[0].dst",
        "got 's1h0' more than once",
    ),
    (
        "rail-missing",
        HEAD + "traffic: [{src: s0h0, dst: s1h0, rails: [0, 1]}]\n",
        "traffic[0].rails[1]",
        "s0h0 has 1 NIC(s), rails 0..0; got rail 1",
    ),
    (
        "rails-word",
        HEAD + "traffic: [{src: s0h0, dst: s1h0, rails: every}]\n",
        "traffic[0].rails",
        "all, or a list of rail numbers",
    ),
    ("src-missing", HEAD + "traffic: [{dst: s1h0}]\n", "traffic[0].src", "required field is missing"),
    (
        "fault-action-typo",
        HEAD + TRAFFIC + "faults: [{at: 1, action: link-dwn, link: [s0h0, t0r0k0]}]\n",
        "faults[0].action",
        "got 'link-dwn' (did you mean 'link-down'?)",
    ),
    (
        "fault-link-one-end",
        HEAD + TRAFFIC + "faults: [{at: 1, action: link-down, link: [s0h0]}]\n",
        "faults[0].link",
        "got a list of 1 item",
    ),
    (
        "fault-at-negative",
        HEAD + TRAFFIC + "faults: [{at: -1, action: link-down, link: [s0h0, t0r0k0]}]\n",
        "faults[0].at",
        "expected seconds >= 0, got -1",
    ),
    (
        "expect-no-bound",
        HEAD + TRAFFIC + "expect: [{metric: fidelity}]\n",
        "expect[0]",
        "expected at least one of min, max, got neither",
    ),
    (
        "expect-metric",
        HEAD + TRAFFIC + "expect: [{metric: latency, max: 1}]\n",
        "expect[0].metric",
        "expected one of 'max_silence_s'",
    ),
    (
        "expect-bound-text",
        HEAD + TRAFFIC + "expect: [{metric: fidelity, min: high}]\n",
        "expect[0].min",
        "expected a number, a percentage such as '45%' (ratios) or a duration such as '2s' (times), "
        "got 'high'",
    ),
    # --- scenario files: semantic ---
    (
        "inline-topology-model",
        "name: t\ntopology: {kind: hpn, dual_tor: false}\nduration: 10\n" + TRAFFIC,
        "topology.planes",
        "two planes need dual_tor: true",
    ),
    (
        "topology-file-missing",
        "name: t\ntopology: nowhere.yaml\nduration: 10\n" + TRAFFIC,
        "topology",
        "topology file 'nowhere.yaml' not found",
    ),
    (
        "dst-unknown-host",
        HEAD + "traffic: [{src: s0h0, dst: s9h0}]\n",
        "traffic[0].dst",
        "host 's9h0' is not in the topology (hosts: s0h0..s1h3)",
    ),
    (
        "src-unknown-host",
        HEAD + "traffic: [{src: h1, dst: s1h0}]\n",
        "traffic[0].src",
        "host 'h1' is not in the topology",
    ),
    (
        "dst-is-switch",
        HEAD + "traffic: [{src: s0h0, dst: [s1h0, t0r0k0]}]\n",
        "traffic[0].dst[1]",
        "'t0r0k0' is a switch (tor), expected a host",
    ),
    ("src-is-dst", HEAD + "traffic: [{src: s0h0, dst: s0h0}]\n", "traffic[0].dst", "also the source"),
    (
        "start-after-end",
        HEAD + "traffic: [{src: s0h0, dst: s1h0, start: 10}]\n",
        "traffic[0].start",
        "expected a start before the end of the run (10s), got 10s",
    ),
    (
        "fault-after-end",
        HEAD + TRAFFIC + "faults: [{at: 12s, action: link-down, link: [s0h0, t0r0k0]}]\n",
        "faults[0].at",
        "expected a time before the end of the run (10s), got 12s",
    ),
    (
        "fault-unknown-node",
        HEAD + TRAFFIC + "faults: [{at: 1, action: link-down, link: [s0h0, zz]}]\n",
        "faults[0].link[1]",
        "node 'zz' is not in the topology",
    ),
    (
        "fault-no-shared-link",
        HEAD + TRAFFIC + "faults: [{at: 1, action: link-down, link: [s0h0, t1r0k0]}]\n",
        "faults[0].link",
        "'s0h0' and 't1r0k0' share no link (s0h0 is linked to t0r0k0, t0r0k1)",
    ),
    (
        "fault-index-range",
        HEAD + TRAFFIC + "faults: [{at: 1, action: link-down, link: [s0h0, t0r0k0], index: 1}]\n",
        "faults[0].index",
        "expected an index below 1",
    ),
    (
        "link-up-first",
        HEAD + TRAFFIC + "faults: [{at: 1, action: link-up, link: [s0h0, t0r0k0]}]\n",
        "faults[0].action",
        "is not down at 1s",
    ),
    (
        "link-down-twice",
        HEAD + TRAFFIC + "faults:\n  - {at: 1, action: link-down, link: [s0h0, t0r0k0]}\n"
        "  - {at: 2, action: link-down, link: [t0r0k0, s0h0]}\n",
        "faults[1].action",
        "already down at 2s (since 1s, faults[0])",
    ),
    (
        "switch-down-of-a-host",
        HEAD + TRAFFIC + "faults: [{at: 1, action: switch-down, switch: s0h0}]\n",
        "faults[0].switch",
        "expected a switch of the topology, got 's0h0'",
    ),
    (
        "switch-down-with-a-link",
        HEAD + TRAFFIC + "faults: [{at: 1, action: switch-down, switch: t0r0k0, link: [s0h0, t0r0k0]}]\n",
        "faults[0].link",
        "a switch-down or switch-up names its switch, not a link",
    ),
    (
        "switch-down-while-a-link-of-it-is-down",
        HEAD + TRAFFIC + "faults:\n  - {at: 1, action: link-down, link: [s0h0, t0r0k0]}\n"
        "  - {at: 2, action: switch-down, switch: t0r0k0}\n",
        "faults[1].action",
        "already down at 2s (since 1s, faults[0])",
    ),
    (
        "degrade-without-a-rate",
        HEAD + TRAFFIC + "faults: [{at: 1, action: link-degrade, link: [s0h0, t0r0k0]}]\n",
        "faults[0].rate",
        "required field is missing",
    ),
    (
        "degrade-to-more-than-the-rate",
        HEAD + TRAFFIC + "faults: [{at: 1, action: link-degrade, link: [s0h0, t0r0k0], rate: 1.5}]\n",
        "faults[0].rate",
        "a share of the link's rate",
    ),
    (
        "rate-on-a-link-down",
        HEAD + TRAFFIC + "faults: [{at: 1, action: link-down, link: [s0h0, t0r0k0], rate: 50%}]\n",
        "faults[0].rate",
        "'rate' belongs to a link-degrade",
    ),
    (
        "restore-of-a-link-not-degraded",
        HEAD + TRAFFIC + "faults: [{at: 1, action: link-restore, link: [s0h0, t0r0k0]}]\n",
        "faults[0].action",
        "is not degraded at 1s; expected a link-degrade of it earlier",
    ),
    (
        "flap-without-a-period",
        HEAD + TRAFFIC + "faults: [{at: 1, action: link-flap, link: [s0h0, t0r0k0], times: 3}]\n",
        "faults[0].every",
        "required field is missing",
    ),
    (
        "flap-past-the-end",
        HEAD + TRAFFIC + "faults: [{at: 1, action: link-flap, link: [s0h0, t0r0k0], every: 2s, times: 3}]\n",
        "faults[0].at",
        "expected a time before the end of the run (10s), got 11s",
    ),
    (
        "expect-min-above-max",
        HEAD + TRAFFIC + "expect: [{metric: fidelity, min: 2, max: 1}]\n",
        "expect[0].min",
        "expected min <= max, got min 2 > max 1",
    ),
    (
        "expect-host-switch",
        HEAD + TRAFFIC + "expect: [{metric: fidelity, min: 1, host: a0n0}]\n",
        "expect[0].host",
        "'a0n0' is a switch (agg)",
    ),
    # --- files that are not YAML mappings ---
    ("yaml-syntax", "kind: hpn\nrates: [1, 2\nmtu: 9000\n", "(top)", "invalid YAML at line 3"),
    (
        "yaml-duplicate-key",
        "kind: hpn\nplanes: 1\nplanes: 2\n",
        "(top)",
        "invalid YAML at line 3, column 1: duplicate key 'planes'",
    ),
    ("empty-file", "", "(top)", "the file is empty"),
    ("top-level-list", "- kind: hpn\n", "(top)", "expected a mapping of fields at the top level, got a list"),
    # --- training jobs and transport ---
    (
        "job-host-unknown",
        HEAD + "jobs: [{name: j, hosts: [s0h0, s9h0], collective: ring, bytes: 1GB}]\n",
        "jobs[0].hosts[1]",
        "host 's9h0' is not in the topology",
    ),
    (
        "job-hd-not-power-of-two",
        HEAD + "jobs: [{name: j, hosts: [s0h0, s0h1, s0h2], collective: halving-doubling, bytes: 1GB}]\n",
        "jobs[0].hosts",
        "power-of-two number of ranks",
    ),
    (
        "job-port-beyond-nic",
        "name: t\ntopology: {kind: hpn, planes: 1, dual_tor: false}\nduration: 10\n"
        "jobs: [{name: j, hosts: [s0h0, s1h0], collective: ring, bytes: 1GB, port: 1}]\n",
        "jobs[0].port",
        "expected a NIC port below 1",
    ),
    (
        "job-groups-split",
        HEAD + "jobs: [{name: j, hosts: [s0h0, s1h0], collective: hierarchical, "
        "bytes: 1GB, groups: [[s0h0]]}]\n",
        "jobs[0].groups",
        "split the job's hosts",
    ),
    (
        "job-bytes-tiny",
        HEAD + "jobs: [{name: j, hosts: [s0h0, s1h0], collective: ring, bytes: 1kB}]\n",
        "jobs[0].bytes",
        "at least one byte per rank after scaling",
    ),
    (
        "job-crux-without-queues",
        HEAD + "jobs: [{name: j, hosts: [s0h0, s1h0], collective: ring, bytes: 1GB, priority: crux}]\n",
        "jobs[0].priority",
        "compressed into the scenario's queue classes",
    ),
    (
        "job-via-without-rules",
        VIA + "via: {}}]\n",
        "jobs[0].via",
        "expected via rules with paths: via",
    ),
    (
        "job-via-rules-without-via",
        VIA.replace("via", "precise") + "via: {s0h0: a0n0}}]\n",
        "jobs[0].via",
        "apply to paths: via only, not precise",
    ),
    (
        "job-via-stranger",
        VIA + "via: {s0h0>s1h3: a0n0}}]\n",
        "jobs[0].via.s0h0>s1h3",
        "expected hosts of this job, got 's1h3'",
    ),
    (
        "job-via-not-a-switch",
        VIA + "via: {s0h0: [a0n0, s1h0]}}]\n",
        "jobs[0].via.s0h0",
        "expected switches of the fabric, got 's1h0'",
    ),
    (
        "job-via-to-itself",
        VIA + "via: {s0h0>s0h0: a0n0}}]\n",
        "jobs[0].via.s0h0>s0h0",
        "a host to itself",
    ),
    (
        "job-via-key-shape",
        VIA + "via: {'s0h0 >$(id)': a0n0}}]\n",
        "jobs[0].via",
        "",
    ),
    (
        "job-paths-unknown",
        HEAD + "jobs: [{name: j, hosts: [s0h0, s1h0], collective: ring, bytes: 1GB, paths: random}]\n",
        "jobs[0].paths",
        "ecmp",
    ),
    (
        "expect-job-unknown",
        HEAD + TRAFFIC + "expect: [{metric: iteration_time_s, job: nope, max: 1}]\n",
        "expect[0].job",
        "job 'nope' is not in this scenario",
    ),
    (
        "expect-flow-metric-with-job",
        HEAD + "jobs: [{name: j, hosts: [s0h0, s1h0], collective: ring, "
        "bytes: 1GB}]\nexpect: [{metric: max_silence_s, job: j, max: 1}]\n",
        "expect[0].job",
        "measured on flows and links, not per job",
    ),
    (
        "expect-fidelity-per-host",
        HEAD + TRAFFIC + "expect: [{metric: fidelity, host: s0h0, min: 0.9}]\n",
        "expect[0].host",
        "fidelity is measured per link",
    ),
    ("rate-zero", "kind: hpn\nrates: {host: 0bit}\n", "rates.host", "expected a rate > 0"),
    (
        "dcqcn-alpha-shorter-than-cnp",
        HEAD + TRAFFIC + "transport: {dcqcn: {alpha_period: 2ms}}\n",
        "transport.dcqcn.alpha_period",
        "longer than the CNP interval",
    ),
    # --- time dilation ---
    (
        "dilation-below-1",
        HEAD + TRAFFIC + "time_dilation: 0.5\n",
        "time_dilation",
        "expected a number from 1 to 64, got 0.5",
    ),
    (
        "dilation-above-64",
        HEAD + TRAFFIC + "time_dilation: 100\n",
        "time_dilation",
        "expected a number from 1 to 64, got 100",
    ),
    (
        "dilation-word",
        HEAD + TRAFFIC + "time_dilation: fast\n",
        "time_dilation",
        "expected a number from 1 to 64, or 'auto', got 'fast'",
    ),
    (
        "dilation-bool",
        HEAD + TRAFFIC + "time_dilation: true\n",
        "time_dilation",
        "expected a number from 1 to 64, or 'auto', got true",
    ),
    (
        "percent-of-seconds",
        HEAD + TRAFFIC + "expect: [{metric: max_silence_s, max: 45%}]\n",
        "expect[0].max",
        "a percentage bounds a ratio and max_silence_s is not one: expected a number, got '45%'",
    ),
    (
        "duration-of-ratio",
        HEAD + TRAFFIC + "expect: [{metric: fault_throughput_ratio, host: s0h0, min: 2s}]\n",
        "expect[0].min",
        "a duration bounds a time and fault_throughput_ratio is not one: expected a number, got '2s'",
    ),
]


def _lines(text):
    return [line for line in text.splitlines() if line]


def _write(tmp_path, text, name="case.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("text,field,message", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_file_is_reported_on_one_line(tmp_path, capsys, text, field, message):
    path = _write(tmp_path, text)
    assert main(["check", path]) == INVALID
    out, err = capsys.readouterr()
    assert out == ""
    lines = _lines(err)
    assert lines, "no problem reported"
    pattern = re.compile(rf"^{re.escape(path)}: (\S+): (.+)$")
    for line in lines:
        assert pattern.match(line), f"not FILE: FIELD: message: {line!r}"
    found = [pattern.match(line).groups() for line in lines]
    assert any(field in f and message in m for f, m in found), f"wanted {field}: ...{message}... in {lines}"
    # The API reports exactly what the command printed.
    assert [str(p) for p in check_files([path])] == lines


def test_enough_distinct_malformed_cases():
    assert len({c[0] for c in MALFORMED}) == len(MALFORMED) >= 20
    assert len({c[1] for c in MALFORMED}) == len(MALFORMED)


def test_problem_is_one_line():
    p = Problem("a.yaml", "traffic[0].dst", "first\n  second")
    assert str(p) == "a.yaml: traffic[0].dst: first second"
    assert str(Problem("a.yaml", "", "x")) == "a.yaml: (top): x"


def test_config_error_lists_every_problem(tmp_path):
    path = _write(
        tmp_path,
        "name: t\ntopology: {kind: hpn, planes: 3, rails: 0}\nduration: -1\n"
        "traffic: [{src: s0h0, dst: s1h0, parallel: 0}]\n",
    )
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    fields = [p.field for p in info.value.problems]
    assert fields == ["topology.planes", "topology.rails", "duration", "traffic[0].parallel"]
    assert str(info.value) == "\n".join(str(p) for p in info.value.problems)


def test_semantic_checks_wait_for_a_valid_schema(tmp_path):
    # The unknown host would be a semantic problem; the bad mtu stops before it.
    path = _write(
        tmp_path,
        "name: t\ntopology: {kind: hpn, mtu: 1}\nduration: 10\ntraffic: [{src: nobody, dst: s1h0}]\n",
    )
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert [p.field for p in info.value.problems] == ["topology.mtu"]


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = _write(tmp_path, "kind: hpn\nsegments: 2\n  planes: 2\n")
    with pytest.raises(ConfigError) as info:
        load_yaml(path)
    (problem,) = info.value.problems
    assert problem.field == "(top)"
    assert "line 3" in problem.message


@pytest.mark.parametrize("name,message", [("missing.yaml", "file not found"), (".", "is a directory")])
def test_unreadable_file_is_one_problem(tmp_path, name, message):
    with pytest.raises(ConfigError) as info:
        load_yaml(tmp_path / name)
    (problem,) = info.value.problems
    assert message in problem.message


def test_not_utf8_is_one_problem(tmp_path):
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"kind: \xff\xfe\n")
    with pytest.raises(ConfigError) as info:
        load_yaml(path)
    assert "UTF-8" in info.value.problems[0].message


def test_unknown_keys_name_the_allowed_ones(tmp_path):
    path = _write(tmp_path, "kind: fat-tree\nk: 4\nleaves: 2\n")
    (problem,) = check_files([path])
    assert problem.message == "unknown field 'leaves' (allowed: kind, k, rates, scale, mtu)"


def test_yaml_merge_keys_are_not_duplicates(tmp_path):
    # `<<:` may be overridden by a key of the same name; that is not a duplicate.
    path = _write(tmp_path, "other: {<<: {x: 1, y: 2}, y: 3}\n")
    assert load_yaml(path)["other"] == {"x": 1, "y": 3}


def test_detect_kind():
    assert detect_kind({"name": "x", "topology": "t.yaml"}) == "scenario"
    assert detect_kind({"kind": "hpn"}) == "topology"


@pytest.mark.parametrize("path", sorted(TOPOLOGIES.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_topologies_are_valid(path):
    params, fabric = load_topology(path)
    assert params["kind"] == fabric.kind
    assert fabric.name == path.stem
    assert fabric.hosts() and fabric.switches() and fabric.links


def test_hpn_mini_is_the_defaults():
    _, fabric = load_topology(TOPOLOGIES / "hpn-mini.yaml")
    assert (len(fabric.hosts()), len(fabric.switches()), fabric.planes()) == (8, 8, [0, 1])
    assert {fabric.scaled_mbit(l) for l in fabric.links if l.kind == "access"} == {40.0}
    assert fabric.mtu == 9000


def test_scenario_is_normalized(tmp_path):
    (tmp_path / "topos").mkdir()
    (tmp_path / "topos" / "mini.yaml").write_text("kind: hpn\n", encoding="utf-8")
    path = _write(
        tmp_path,
        """\
name: dual-tor-link-failure
topology: topos/mini.yaml
duration: 25s
traffic:
  - {src: s0h0, dst: [s1h0, s1h1], parallel: 2}
  - {kind: iperf3, src: s1h2, dst: s0h2, start: 1.5s}
faults:
  - {at: 10, action: link-up, link: [t0r0k0, s0h0]}
  - {at: 5, action: link-down, link: [s0h0, t0r0k0]}
expect:
  - {metric: fault_throughput_ratio, host: s0h0, min: 0.45}
  - {metric: max_silence_s, min: 0, max: 1.5}
  - {name: mine, metric: fidelity, max: 1}
  - {metric: recovered_throughput_ratio, host: s0h0, min: 90%}
  - {metric: max_silence_s, max: 1500ms}
""",
    )
    s = load_scenario(path)
    assert (s.name, s.description, s.path, s.duration_s) == ("dual-tor-link-failure", "", path, 25.0)
    assert [(e.min, e.max) for e in s.expect[3:]] == [(0.9, None), (None, 1.5)]
    assert s.topology_params == {"kind": "hpn"}
    assert Path(s.topology_path) == tmp_path / "topos" / "mini.yaml"
    assert s.fabric.name == "mini" and len(s.fabric.hosts()) == 8
    assert s.traffic == [
        TrafficFlow(kind="iperf3", src="s0h0", dst=("s1h0", "s1h1"), parallel=2, start=0.0, dscp=0),
        TrafficFlow(kind="iperf3", src="s1h2", dst=("s0h2",), parallel=1, start=1.5, dscp=0),
    ]
    assert s.faults == [
        Fault(at=5.0, action="link-down", link=("s0h0", "t0r0k0"), index=0),
        Fault(at=10.0, action="link-up", link=("t0r0k0", "s0h0"), index=0),
    ]
    assert [e.name for e in s.expect] == [
        "fault_throughput_ratio of s0h0 >= 0.45",
        "max_silence_s in [0, 1.5]",
        "mine",
        "recovered_throughput_ratio of s0h0 >= 0.9",
        "max_silence_s <= 1.5",
    ]
    assert s.expect[1].host is None


def test_problems_in_a_referenced_topology_name_that_file(tmp_path):
    _write(tmp_path, "kind: hpn\nplanes: 5\n", "bad-topo.yaml")
    path = _write(tmp_path, "name: t\ntopology: bad-topo.yaml\nduration: 10\n" + TRAFFIC)
    (problem,) = check_files([path])
    assert Path(problem.file) == tmp_path / "bad-topo.yaml"
    assert problem.field == "planes"


def test_schemas_are_valid_and_share_the_unit_patterns():
    topology, scenario = load_schema("topology"), load_schema("scenario")
    for schema in (topology, scenario):
        Draft202012Validator.check_schema(schema)
    assert topology["$defs"]["rate"]["pattern"] == units.RATE_PATTERN
    assert topology["$defs"]["time"]["pattern"] == units.TIME_PATTERN
    for key in ("duration", "seconds"):
        assert scenario["$defs"][key]["else"]["pattern"] == units.TIME_PATTERN


def test_every_object_in_the_schemas_is_closed():
    """Each schema that lists properties also forbids others (or is a dispatcher)."""

    def walk(node, where):
        if isinstance(node, dict):
            if (
                "properties" in node
                and node.get("type") == "object"
                and "allOf" not in node
                and not where.startswith("#/$defs/is-")
            ):
                assert node.get("additionalProperties") is False, where
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}/{i}")

    for name in ("topology", "scenario"):
        walk(load_schema(name), "#")
    assert json.dumps(load_schema("scenario"))  # plain JSON, no custom types


def test_schema_knows_exactly_the_metrics_expectations_can_measure():
    from testbed.results.expectations import JOB_METRICS, METRICS

    enum = load_schema("scenario")["$defs"]["expect"]["properties"]["metric"]["enum"]
    assert set(enum) == set(METRICS) | set(JOB_METRICS)


def test_a_switch_fails_from_its_hosts_in_and_comes_back_from_its_uplinks_out(tmp_path):
    from testbed.fabric.scenario import load_scenario

    path = tmp_path / "tor.yaml"
    path.write_text(
        "name: tor\ntopology: {kind: hpn}\nduration: 20\ntraffic: [{src: s0h0, dst: s1h0}]\nfaults:\n"
        "  - {at: 5, action: switch-down, switch: t0r0k0, name: tor_down}\n"
        "  - {at: 15, action: switch-up, switch: t0r0k0, name: tor_up}\n"
    )
    sc = load_scenario(path)
    down = [f.link[1] for f in sc.faults if f.action == "link-down"]
    up = [f.link[1] for f in sc.faults if f.action == "link-up"]
    assert down == ["s0h0", "s0h1", "s0h2", "s0h3", "a0n0", "a0n1"]
    assert up == ["a0n0", "a0n1", "s0h0", "s0h1", "s0h2", "s0h3"]
    assert {f.name for f in sc.faults} == {"tor_down", "tor_up"} and {f.source for f in sc.faults} == {0, 1}
