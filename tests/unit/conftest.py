"""Fixtures several unit test modules share."""

import pytest

from testbed.drill.agents import FRAMES_SOURCE
from testbed.emulation import compiled


@pytest.fixture(scope="session")
def c_frames(tmp_path_factory):
    """The traffic agents' C library (traffic/cframes.py), built for the tests;
    skipped where no C compiler is."""
    from traffic import cframes

    if compiled.compiler() is None:
        pytest.skip("no C compiler to build the agents' C frame library")
    path = compiled.shared_library(FRAMES_SOURCE, "frames-", out_dir=str(tmp_path_factory.mktemp("lib")))
    return cframes.CFrames(path)
