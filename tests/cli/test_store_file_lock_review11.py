"""One writer at a time for a budget-store file (store review of 2026-11-23, F2): a running `demo --store FILE`
saved the whole file before each publication and so undid an operator's `streamdp budget grant` made meanwhile
(its audit entry too); the other order rolled back the demo's charges. Writers now hold `<file>.lock`."""

import json
import subprocess
import sys
import textwrap

import pytest

from streamdp.cli.main import main
from streamdp.filter import open_store
from streamdp.filter.file_lock import StoreBusy

HOLD = textwrap.dedent("""
    import sys, time
    from streamdp.filter import open_store
    st = open_store(sys.argv[1], lock=True)  # as a running demo holds it
    print("held", flush=True)
    sys.stdin.readline()
    st.close()
""")


@pytest.fixture
def holder(tmp_path):
    """Another process writing the store file (as a running demo does) until the test lets it go."""
    path = tmp_path / "store.json"
    assert main(["budget", "set-default", "--store", str(path), "--rho", "1.0", "--delta", "1e-4", "--yes",
                 "--create"]) == 0
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "held"
    yield path
    if p.poll() is None:
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait(30)


def test_a_budget_write_is_refused_while_another_process_writes_the_file(holder, capsys):
    before = holder.read_bytes()
    assert main(["budget", "grant", "u1", "--store", str(holder), "--rho", "0.3", "--yes"]) == 1
    err = capsys.readouterr().err
    assert "is being written by another streamdp process" in err and "Traceback" not in err
    assert holder.read_bytes() == before  # nothing written
    assert main(["budget", "show", "u1", "--store", str(holder)]) in (0, 1)  # a read takes no lock
    assert "being written" not in capsys.readouterr().err
    with pytest.raises(StoreBusy):
        open_store(str(holder), lock=True)


def test_a_demo_is_refused_while_another_process_writes_the_file(holder, tmp_path, capsys):
    assert main(["demo", "--store", str(holder), "--out", str(tmp_path / "o"), "--data", "synthetic", "--users",
                 "50", "--windows", "2", "--rate", "100", "--quiet", "--no-plot"]) == 2
    assert "is being written by another streamdp process" in capsys.readouterr().err


def test_the_lock_goes_with_the_writer(tmp_path):
    path = str(tmp_path / "store.json")
    st = open_store(path, lock=True)
    with pytest.raises(StoreBusy):
        open_store(path, lock=True)
    st.close()  # saved and released
    open_store(path, lock=True).close()
    assert json.load(open(path))["default"] is not None
