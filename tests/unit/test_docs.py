"""The documentation: the reference pages are what the code declares (the
schemas, the metric vocabulary, the argument parser), the README stays a
short way in, and every relative link in it and in docs/ leads to a file."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _reference_module():
    spec = importlib.util.spec_from_file_location("reference", ROOT / "scripts" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reference_pages_are_what_the_code_declares():
    reference = _reference_module()
    for name, text in reference.pages().items():
        page = ROOT / "docs" / "reference" / name
        assert page.exists() and page.read_text() == text, (
            f"{page} is stale: run python3 scripts/reference.py"
        )


def test_the_reference_names_every_field_and_metric():
    reference = _reference_module()
    pages = reference.pages()
    for field in ("time_dilation", "controller_timeline", "queues.ports", "crux", "relative_to"):
        assert f"`{field.split('.')[-1]}`" in pages["scenario.md"] or f"## {field}" in pages["scenario.md"], (
            field
        )
    for metric in ("bytes_per_rank", "gap_ms", "class_paused_s", "max_silence_s", "fidelity"):
        assert f"| `{metric}` |" in pages["metrics.md"], metric
    assert "## hpnlab lab grade" in pages["cli.md"] and "--junit FILE" in pages["cli.md"]
    assert "| `tor-failure` |" in pages["scenarios.md"]


def test_the_readme_is_a_short_way_in():
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) < 10_500, f"README.md is {len(text.encode())} bytes: move the detail to docs/"
    assert "sudo hpnlab run scenarios/dual-tor-link-failure.yaml" in text


def test_every_relative_link_leads_to_a_file():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)", page.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue  # an address, not a file of ours
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)}: link to {target}"
