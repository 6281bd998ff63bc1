import json
import os

import pytest

from streamdp.cli.main import main

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "service.toml")


def test_demo_on_real_data_writes_jsonl_summary_and_plot(tmp_path, capsys):
    out = tmp_path / "demo"
    rc = main(["demo", "--out", str(out), "--limit", "30000", "--quiet", "--unsafe-test-seed", "3"])
    assert rc == 0
    assert (out / "plot.png").stat().st_size > 10_000
    lines = (out / "releases" / "dest_counts.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    assert recs and recs[0]["schema_version"] == 2 and recs[0]["query"] == "dest_counts"
    assert all(isinstance(v, int) for r in recs for v in r["values"]["counts"].values())
    assert (out / "releases" / "top_dest.jsonl").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["events"] == 30000 and summary["dead_letters"] > 0  # flights without a tail number
    assert "missing_user" in summary["dead_letter_reasons"]
    # --limit takes the year's first departures (January, then February), so none is too far in the future
    assert "too_far_in_future" not in summary["dead_letter_reasons"]
    assert "streamdp demo:" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["demo", "--limit", "0"], ["demo", "--limit", "-5"],
                                  ["replay", "--nycflights13", "--limit", "ten"]])
def test_limit_must_be_a_positive_integer(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and "expected a positive integer" in capsys.readouterr().err


def test_demo_synthetic(tmp_path):
    out = tmp_path / "synth"
    rc = main(["demo", "--data", "synthetic", "--out", str(out), "--users", "500", "--items", "200",
               "--windows", "4", "--rate", "2000", "--quiet", "--no-plot"])
    assert rc == 0
    assert len((out / "releases" / "item_counts.jsonl").read_text().splitlines()) == 4


def test_demo_is_deterministic_in_test_mode(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        assert main(["demo", "--out", str(d), "--limit", "8000", "--quiet", "--no-plot",
                     "--unsafe-test-seed", "9"]) == 0
    assert (a / "releases" / "dest_counts.jsonl").read_bytes() == (b / "releases" / "dest_counts.jsonl").read_bytes()


def test_queries_kinds_lists_every_kind_with_cost(capsys):
    assert main(["queries", "kinds", "--json"]) == 0
    kinds = {k["kind"]: k for k in json.loads(capsys.readouterr().out)}
    assert {"continual_counts", "top_k"} <= set(kinds)
    for k in kinds.values():
        assert k["notion"] in ("zcdp", "cgp", "emd") and k["cost"] and k["params"]
    assert main(["queries", "kinds"]) == 0
    assert "continual_counts" in capsys.readouterr().out


def test_config_check_ok(capsys):
    assert main(["config", "check", EXAMPLE]) == 0
    assert "OK" in capsys.readouterr().out


@pytest.mark.parametrize("body,field", [
    ("[service]\nwindow_seconds = -1\norigin = 0\n[[query]]\nid='a'\nkind='continual_counts'\nsigma=1\n", "service.window_seconds"),
    ("[service]\nwindow_seconds = 60\norigin = 0\n[[query]]\nid='a'\nkind='continual_counts'\n", "query[0].sigma"),
    ("[service]\nwindow_seconds = 60\norigin = 0\n[[query]]\nid='a'\nkind='continual_counts'\nsigma='x'\n", "query[0].sigma"),
    ("[service]\nwindow_seconds = 60\norigin = 0\n[[query]]\nid='a'\nkind='nope'\n", "query[0].kind"),
    ("[service]\nwindow_seconds = 60\norigin = 0\n[[query]]\nid='a'\nkind='top_k'\nepsilon=1\nk=5\nkbar=2\n", "query[0].kbar"),
    ("[service]\nwindow_seconds = 60\norigin = 0\n[[query]]\nid='a'\nkind='continual_counts'\nsigma=1\nbogus=2\n",
     "query[0].bogus"),
    ("[service]\nwindow_seconds = 60\norigin = 0\n[budget]\nzcdp_rho = -2\n[[query]]\nid='a'\nkind='continual_counts'\nsigma=1\n",
     "budget.zcdp_rho"),
    ("[service]\nwindow_seconds = 60\norigin = 0\n[budget]\nzcdp_delta = 1.0\n[[query]]\nid='a'\nkind='continual_counts'\n"
     "sigma=1\n", "budget.zcdp_delta"),
    # values that used to pass the check and fail later (a crash at the first window close, a retry loop, an
    # overflow, dead letters read back forever): refused at start with the field or query named
    ("[service]\nwindow_seconds = 60\norigin = 0\n[[query]]\nid='a'\nkind='top_k'\nepsilon=5000\n", "query[0]: kind 'top_k'"),
    ("[service]\nwindow_seconds = 60\norigin = 0\n[[query]]\nid='a'\nkind='continual_counts'\nsigma=1e-10\n",
     "query[0]: kind 'continual_counts'"),
    ("[service]\nwindow_seconds = 60\norigin = 0\n[[query]]\nid='a'\nkind='window_histogram'\nepsilon=1e200\n",
     "query[0]: kind 'window_histogram'"),
    ("[service]\nwindow_seconds = 60\norigin = 0\nunsafe_test_seed = -1\n[[query]]\nid='a'\nkind='top_k'\nepsilon=1\n",
     "service.unsafe_test_seed"),
    ("[service]\nwindow_seconds = 60\norigin = 1e300\n[[query]]\nid='a'\nkind='top_k'\nepsilon=1\n", "service.origin"),
    ("[service]\nwindow_seconds = 1e-300\norigin = 0\n[[query]]\nid='a'\nkind='top_k'\nepsilon=1\n", "service.window_seconds"),
    ("[kafka]\ndead_letter_topic='streamdp.events'\n[service]\nwindow_seconds = 60\norigin = 0\n[[query]]\nid='a'\nkind='top_k'\n"
     "epsilon=1\n", "kafka.dead_letter_topic"),
    ("[kafka]\noutput_prefix=''\ninput_topic='a'\n[service]\nwindow_seconds = 60\norigin = 0\n[[query]]\nid='a'\nkind='top_k'\n"
     "epsilon=1\n", "query[0].id (output topic)"),
    ("[kafka]\ngroup_id=''\n[service]\nwindow_seconds = 60\norigin = 0\n[[query]]\nid='a'\nkind='top_k'\nepsilon=1\n",
     "kafka.group_id"),
    ("[service]\nwindow_seconds = 60\norigin = 0\n[budget]\ncgp_delta = 5\n[[query]]\nid='a'\nkind='continual_counts'\nsigma=1\n",
     "budget.cgp_delta"),
    ("[service]\nwindow_seconds = 60\norigin = 0\nhorizon = 0\n[[query]]\nid='a'\nkind='continual_counts'\nsigma=1\n",
     "service.horizon"),
    ("[service]\nwindow_seconds = 60\norigin = 0\n", "query"),
    ("[service]\nwindow_seconds = 60\norigin = 0\n[[query]]\nid='a'\nkind='continual_counts'\nsigma=1\n"
     "[[query]]\nid='a'\nkind='continual_counts'\nsigma=1\n", "query[1].id"),
    ("[service\nwindow_seconds = 60\norigin = 0\n", "not valid TOML"),
    ("[kafka]\nsecurity_protocol='TLS'\n[service]\nwindow_seconds = 60\norigin = 0\n[[query]]\nid='a'\nkind='top_k'\nepsilon=1\n",
     "kafka.security_protocol"),
])
def test_config_check_names_the_offending_field(tmp_path, capsys, body, field):
    p = tmp_path / "bad.toml"
    p.write_text(body)
    assert main(["config", "check", str(p)]) != 0
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_config_check_missing_file(capsys):
    assert main(["config", "check", "/nonexistent/x.toml"]) != 0
    assert "not found" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["run", "--role", "ingest", "--standalone"], "--standalone is for --role all"),
    (["run", "--role", "ingest", "--session-timeout-ms", "10"], "--session-timeout-ms must be ≥ 1000"),
    (["run", "--role", "coordinator", "--store", "memory://"], "needs a Redis budget store"),
    (["run", "--input-topic", "streamdp.dead", "--store", "redis://127.0.0.1:1/0"], "kafka.dead_letter_topic"),
    (["run", "--role", "ingest", "--input-topic", "streamdp.dead"], "kafka.dead_letter_topic"),
    (["run", "--unsafe-test-seed", "-3", "--store", "redis://127.0.0.1:1/0"], "--unsafe-test-seed must be ≥ 0"),
])
def test_run_roles_refuse_bad_flags_with_one_clear_line(argv, message, capsys, monkeypatch):
    # a flag that is no longer refused must fail here at once, not start a worker that retries a broker forever
    import streamdp.adapters.kafka.ingest as ingest
    import streamdp.adapters.kafka.worker as worker
    import streamdp.cli.service as service

    def started(*a, **k):
        raise AssertionError(f"{argv} was not refused: a store or worker was started")

    monkeypatch.setattr(service, "open_store_retrying", started)
    monkeypatch.setattr(worker, "KafkaWorker", started)
    monkeypatch.setattr(ingest, "IngestWorker", started)
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert message in err
    with pytest.raises(SystemExit):  # argparse: not a role
        main(["run", "--role", "stage-b"])
    assert "invalid choice: 'stage-b'" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["run", "--store", "redis://127.0.0.1:1/0"], ["replay", "--nycflights13"]])
def test_kafka_commands_without_the_kafka_extra_say_what_to_install(argv, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "aiokafka" else real(name, *a))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "needs the 'kafka' extra (aiokafka not installed)" in err and "pip install -e '.[kafka]'" in err


def test_demo_keeps_budgets_in_memory_whatever_store_the_config_names(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text('store = "redis://127.0.0.1:1/0"\n' + open(EXAMPLE).read().split("\n", 2)[2])
    assert main(["demo", "--config", str(cfg), "--out", str(tmp_path / "o"), "--limit", "2000", "--quiet",
                 "--no-plot"]) == 0
    err = capsys.readouterr().err
    assert "budgets are kept in memory" in err and "redis://127.0.0.1:1/0" in err


@pytest.mark.parametrize("module", ["streamdp", "streamdp.cli.main"])
def test_python_dash_m_reports_a_bad_config_in_one_line(tmp_path, module):
    """``python -m`` runs the same command: a bad field is one clear line and status 1, never a traceback (run as
    __main__, cli/main.py is a second module whose CLIError the commands' errors would slip past)."""
    import subprocess
    import sys

    p = tmp_path / "bad.toml"
    p.write_text("[service]\nwindow_seconds = 60\norigin = 0\n[budget]\nzcdp_delta = 1.0\n"
                 "[[query]]\nid='a'\nkind='continual_counts'\nsigma=1\n")
    r = subprocess.run([sys.executable, "-m", module, "config", "check", str(p)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1
    assert "budget.zcdp_delta: must be < 1.0" in r.stderr and "Traceback" not in r.stderr


def test_run_retries_an_unreachable_store_with_backoff_then_gives_up_in_one_line(monkeypatch):
    """contract §6: Redis unavailable at start is retried with exponential backoff (0.5, 1, 2 … 10 s), for
    --store-wait seconds; a malformed URL fails at once."""
    import streamdp.filter as filt
    from streamdp.cli.main import CLIError
    from streamdp.cli.service import open_store_retrying
    from streamdp.filter.store import StoreError

    calls, slept, now = [], [], [0.0]

    def flaky(url, budget):
        calls.append(url)
        if len(calls) < 4:
            raise StoreError("unreachable")
        return "store"

    def sleep(d):
        slept.append(d)
        now[0] += d

    monkeypatch.setattr(filt, "open_store", flaky)
    assert open_store_retrying("redis://x", None, None, sleep=sleep, clock=lambda: now[0]) == "store"
    assert slept == [0.5, 1.0, 2.0] and len(calls) == 4
    # never answers, --store-wait 3: sleeps 0.5 and 1 s, then the next 2 s would pass 3 s in all: gives up
    monkeypatch.setattr(filt, "open_store", lambda url, budget: (_ for _ in ()).throw(StoreError("down")))
    slept.clear()
    now[0] = 0.0
    with pytest.raises(CLIError, match=r"retried for 1\.5 s\): down"):
        open_store_retrying("redis://x", None, 3.0, sleep=sleep, clock=lambda: now[0])
    assert slept == [0.5, 1.0]
    monkeypatch.setattr(filt, "open_store", lambda url, budget: (_ for _ in ()).throw(ValueError("bad scheme")))
    with pytest.raises(CLIError, match="bad scheme"):
        open_store_retrying("nope://x", None, None, sleep=sleep)
