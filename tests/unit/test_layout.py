"""The package layout keeps data flowing one way: fabric -> emulation ->
drill -> results, the capacity plan on the pure fabric and results, the
pure scheduling (Crux, placement) on the pure fabric alone, and controllers
and traffic beside them importing only the pure fabric and scheduling;
inside traffic, the agent's process over its sides over its jobs, and the
pure transport and schedules apart from the agent. Read from the import
statements of every module."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("testbed", "controllers", "traffic")

AGENT_PARTS = (
    "traffic.agent",
    "traffic.sender",
    "traffic.receiver",
    "traffic.job",
    "traffic.transfers",
    "traffic.nic",
)

# package (as a dotted prefix) -> project packages it must never import
FORBIDDEN = {
    "testbed.fabric": (
        "testbed.emulation",
        "testbed.drill",
        "testbed.results",
        "testbed.plan",
        "testbed.cli",
        "controllers",
        "traffic",
    ),
    "testbed.schedule": (
        "testbed.emulation",
        "testbed.drill",
        "testbed.results",
        "testbed.plan",
        "testbed.cli",
        "controllers",
        "traffic",
    ),
    "testbed.emulation": ("testbed.drill", "testbed.results", "testbed.plan", "testbed.cli", "controllers"),
    "testbed.results": ("testbed.emulation", "testbed.drill", "testbed.plan", "testbed.cli", "controllers"),
    "testbed.plan": ("testbed.emulation", "testbed.drill", "testbed.cli", "controllers"),
    "testbed.drill": ("testbed.cli", "controllers"),
    "testbed.cli": ("controllers",),
    # the labs' checker judges measured results; it runs drills through
    # the command line, never by reaching into the machinery
    "testbed.lab": ("testbed.emulation", "testbed.drill", "testbed.cli", "controllers", "traffic"),
    "controllers": (
        "testbed.emulation",
        "testbed.drill",
        "testbed.results",
        "testbed.plan",
        "testbed.cli",
        "traffic",
    ),
    "traffic": (
        "testbed.emulation",
        "testbed.drill",
        "testbed.results",
        "testbed.plan",
        "testbed.cli",
        "controllers",
    ),
    # Inside the traffic agent: the process (agent) over its sending and
    # receiving sides (sender, receiver), over a rank's progress (job) and
    # the transfers; the pure state machines, frames and schedules import
    # none of the agent's parts.
    "traffic.receiver": ("traffic.agent",),
    "traffic.sender": ("traffic.agent", "traffic.receiver"),
    "traffic.job": ("traffic.agent", "traffic.sender", "traffic.receiver"),
    "traffic.transfers": ("traffic.agent", "traffic.sender", "traffic.receiver"),
    **{
        pure: AGENT_PARTS
        for pure in (
            "traffic.collectives",
            "traffic.makespan",
            "traffic.transport",
            "traffic.gobackn",
            "traffic.roce",
        )
    },
}


def modules():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield ".".join(path.relative_to(ROOT).with_suffix("").parts), path


def imported(module, source, is_package=False):
    """Absolute names of everything `source` (the text of `module`) imports,
    relative imports resolved."""
    package = module if is_package else module.rsplit(".", 1)[0]
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return names


def _within(name, prefix):
    return name == prefix or name.startswith(prefix + ".")


def test_imports_point_one_way():
    wrong, seen = [], 0
    for module, path in modules():
        seen += 1
        rules = [bad for owner, bad in FORBIDDEN.items() if _within(module, owner)]
        names = imported(module, path.read_text(encoding="utf-8"), path.name == "__init__.py")
        wrong += sorted(
            {
                f"{module} imports {name}"
                for name in names
                for bad in rules
                for prefix in bad
                if _within(name, prefix)
            }
        )
    assert seen > 40  # the walk found the project's modules
    assert not wrong, "; ".join(wrong)


def test_the_rule_sees_relative_and_absolute_imports():
    # A check that cannot fail proves nothing: feed it both kinds of import.
    names = imported("testbed.fabric.model", "from ..drill import runner\nimport controllers.routing\n")
    assert "testbed.drill.runner" in names and "controllers.routing" in names
    names = imported("testbed.fabric", "from .paths import trace\n", is_package=True)
    assert "testbed.fabric.paths.trace" in names


def test_a_wrong_arrow_is_caught():
    # The shared scheduling code importing the controller is exactly what the rule forbids.
    names = imported("testbed.schedule.placement", "from controllers import openflow\n")
    rules = [bad for owner, bad in FORBIDDEN.items() if _within("testbed.schedule.placement", owner)]
    assert any(_within(n, prefix) for n in names for bad in rules for prefix in bad)
    # and inside traffic: a rank's progress reaching for the sending side
    names = imported("traffic.job", "from .sender import Sender\n")
    rules = [bad for owner, bad in FORBIDDEN.items() if _within("traffic.job", owner)]
    assert any(_within(n, prefix) for n in names for bad in rules for prefix in bad)


# The controller's decisions stay testable without an OpenFlow framework:
# only the shim and what builds messages may import os-ken (through compat).
FRAMEWORK = ("os_ken", "ryu", "controllers.compat", "controllers.hpn_app", "controllers.openflow")
PURE_CONTROLLER = ("controllers.core", "controllers.routing")


def test_the_controller_core_needs_no_openflow_framework():
    wrong = []
    for module, path in modules():
        if module not in PURE_CONTROLLER:
            continue
        names = imported(module, path.read_text(encoding="utf-8"))
        wrong += [f"{module} imports {n}" for n in names for prefix in FRAMEWORK if _within(n, prefix)]
    assert not wrong, "; ".join(wrong)
    # and the rule sees such an import
    names = imported("controllers.core", "from .compat import ofp_event\n")
    assert any(_within(n, "controllers.compat") for n in names)


def test_the_command_line_starts_without_scapy():
    """Every `hpnlab` command imports the command line; scapy (about 0.4 s a
    start, and it reads the routes of every interface where it runs) is for
    the agents' frame templates and a capture's dissection alone."""
    probe = "import sys, testbed.cli; print(sorted(m for m in sys.modules if m.split('.')[0] == 'scapy'))"
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", r.stdout
