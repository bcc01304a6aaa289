"""Machine track without an engine: interactions files and their importers, /proc capture parsing,
which processes a snapshot records, volatile paths and replay digests, machine states in
states.yaml, track kinds and the local backend's refusal."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml

from swe_residual import interactions as ia
from swe_residual.backends.machine.snapshot import (
    DEFAULT_VOLATILE,
    ProcessSpec,
    declared_up,
    differences,
    is_volatile,
    parse_capture,
    parse_digests,
    process_differences,
    started_processes,
    tree_digest,
)
from swe_residual.errors import InputError
from swe_residual.states import load_states
from swe_residual.tasks import load_tasks
from swe_residual.tracks import load_track_config

from .drivers import run_suite

ROOT = Path(__file__).resolve().parent.parent
TB = ROOT / "suites" / "terminal_bench"


# -- interactions.jsonl -------------------------------------------------------------------------------


def test_interactions_round_trip_and_bad_lines_name_file_line_and_field(tmp_path):
    items = [
        ia.Interaction(
            kind="command",
            input="make install",
            timeout=60,
            exit_status=0,
            output_sha256=ia.output_digest("ok\n"),
        ),
        ia.Interaction(kind="keys", input="C-c", wait=0.5),
    ]
    path = tmp_path / "i.jsonl"
    ia.write_interactions(path, items)
    assert ia.read_interactions(path) == items
    # exclude_none: a keystroke line carries no exit status
    assert json.loads(path.read_text().splitlines()[1]) == {"kind": "keys", "input": "C-c", "wait": 0.5}
    path.write_text('{"kind": "command", "input": "ls"}\n{"kind": "keys", "input": "x", "wait": -1}\n')
    with pytest.raises(InputError) as err:
        ia.read_interactions(path)
    assert str(err.value).startswith(f"{path}:2: wait: ") and "\n" not in str(err.value)
    path.write_text('{"kind": "typing", "input": "ls"}\n')
    with pytest.raises(InputError, match=r"i\.jsonl:1: kind: "):
        ia.read_interactions(path)
    path.write_text("not json\n")
    with pytest.raises(InputError, match=r"i\.jsonl:1: not JSON"):
        ia.read_interactions(path)


def test_atif_terminus_keystrokes_become_keys_with_their_durations():
    # the shape Terminus-2 writes: bash_command calls with keystrokes + duration, one observation
    # per step for its whole batch, and a mark_task_complete call that is no terminal input
    atif = {
        "schema_version": "ATIF-v1.5",
        "steps": [
            {"step_id": 1, "source": "user", "message": "the task"},
            {
                "step_id": 2,
                "source": "agent",
                "message": "look",
                "tool_calls": [
                    {
                        "tool_call_id": "call_0_1",
                        "function_name": "bash_command",
                        "arguments": {"keystrokes": "ls -la\n", "duration": 0.1},
                    },
                    {
                        "tool_call_id": "call_0_2",
                        "function_name": "bash_command",
                        "arguments": {"keystrokes": "make\n", "duration": 5},
                    },
                ],
                "observation": {"results": [{"content": "New Terminal Output:\nok"}]},
            },
            {
                "step_id": 3,
                "source": "agent",
                "message": "wait",
                "tool_calls": [
                    {
                        "function_name": "bash_command",
                        "arguments": json.dumps({"keystrokes": "", "duration": "x"}),
                    },
                    {"function_name": "mark_task_complete", "arguments": {}},
                ],
            },
            {
                "step_id": 4,
                "source": "agent",
                "tool_calls": [{"function_name": "bash", "arguments": {"command": "pwd"}}],
            },
        ],
    }
    got = ia.from_atif(atif)
    assert [(i.kind, i.input, i.wait) for i in got] == [
        ("keys", "ls -la\n", 0.1),
        ("keys", "make\n", 5.0),
        ("keys", "", ia.DEFAULT_KEYS_WAIT),  # a bad duration: Terminus-2's default
        ("command", "pwd", None),
    ]
    # the step's one observation belongs to its last input
    assert got[0].output_sha256 is None and got[1].output_sha256 == ia.output_digest(
        "New Terminal Output:\nok"
    )


def test_tb1_commands_txt_reprs_merge_enter_and_reject_code():
    text = "'cd /app\\n'\n['make', 'Enter']\n['C-c']\n\n['python3 x.py', 'Enter', 'q']\n"
    got = ia.from_tb1_commands(text, "commands.txt")
    assert [(i.input, i.wait) for i in got] == [
        ("cd /app\n", None),
        ("make\n", None),
        ("C-c", None),
        ("python3 x.py\n", None),
        ("q", None),
    ]
    with pytest.raises(InputError, match=r"^commands.txt:2: not a Python string or list of strings$"):
        ia.from_tb1_commands("'ok'\n__import__('os').system('id')\n", "commands.txt")
    with pytest.raises(InputError, match=r"^commands.txt:1: "):
        ia.from_tb1_commands("[1, 2]\n", "commands.txt")


# -- /proc capture ------------------------------------------------------------------------------------


def _b(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _proc(
    pid,
    ppid,
    start,
    argv,
    *,
    comm=None,
    cwd="/root",
    env=("PATH=/usr/bin", "HOME=/root"),
    fd1="/dev/null",
    fd2="/dev/null",
    socks="-",
    state="S",
    uid=0,
    session=None,
) -> str:
    return "\t".join(
        [
            "P",
            str(pid),
            str(ppid),
            str(uid),
            str(uid),
            str(start),
            state,
            str(pid if session is None else session),
            _b((comm or Path(argv[0]).name) + "\n"),
            _b("\0".join(argv) + "\0"),
            _b(cwd),
            _b("\0".join(env) + "\0"),
            _b("/dev/null"),
            _b(fd1),
            _b(fd2),
            socks,
        ]
    )


def _capture() -> str:
    keepalive = ["bash", "-c", "while :; do sleep 86400 & wait $!; done"]
    lines = [
        _proc(1, 0, 10, keepalive),
        _proc(7, 1, 11, ["sleep", "86400"], session=1),
        # the keepalive's next idle child, forked after the replay's first look: still the init's
        _proc(8, 1, 12, ["sleep", "86400"], session=1),
        # our terminal: tmux server on the harness socket and its pane shell
        _proc(
            20,
            1,
            50,
            ["tmux", "-L", "swe-residual", "new-session", "-d", "-s", "replay"],
            comm="tmux: server",
        ),
        _proc(21, 20, 51, ["bash", "--login"]),
        # a service started from the pane, forking a worker that holds the listening socket
        _proc(
            30,
            21,
            60,
            ["python3", "/opt/kv.py", "--config", "/etc/kv.conf"],
            fd1="/var/log/kv.log",
            fd2="/var/log/kv.log",
        ),
        _proc(31, 30, 61, ["python3", "/opt/kv.py", "--worker"], socks="9001,"),
        # a daemon reparented to PID 1, started earlier, listening on IPv6 loopback
        _proc(
            25,
            1,
            55,
            ["emu", "-serial", "tcp::1:4555"],
            cwd="/srv",
            fd1="/tmp/.swe-residual-out.ab12",
            socks="9002,",
        ),
        _proc(40, 1, 70, ["defunct"], state="Z"),
        # an agent's own tmux server (not the harness's socket) is the machine's
        _proc(50, 1, 80, ["tmux", "new", "-d", "top"], comm="tmux: server"),
    ]
    header = (
        "T4\t  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"
    )
    tcp4 = "T4\t   0: 0100007F:1B9E 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 9001 1"
    tcp6 = (
        "T6\t   0: 00000000000000000000000001000000:11CB 00000000000000000000000000000000:0000 0A "
        "00000000:00000000 00:00000000 00000000     0        0 9002 1"
    )
    established = "T4\t   1: 0100007F:1B9E 0100007F:D0A2 01 00000000:00000000 00:00000000 00000000 0 0 9003 1"
    return "\n".join(lines + [header, tcp4, tcp6, established]) + "\n"


def test_capture_parsing_and_the_processes_a_snapshot_records():
    procs, listen = parse_capture(_capture())
    assert procs[30].argv == ["python3", "/opt/kv.py", "--config", "/etc/kv.conf"]
    assert procs[30].comm == "python3" and procs[30].cwd == "/root"
    # 0x1B9E = 7070 on 127.0.0.1; 0x11CB = 4555 on ::1 (little-endian words); only LISTEN (0A) rows
    assert listen == {"9001": ("127.0.0.1", 7070), "9002": ("::1", 4555)}
    specs = started_processes(procs, listen, baseline={1, 7})
    # roots only, in start order: emu (55) then the service (60); its worker is its descendant;
    # the harness tmux (20) and its pane shell (21) never; the init's own children (7 and 8, in
    # its session; 8 not in the baseline) never; the zombie never; the agent's tmux yes
    assert [s.argv[0] for s in specs] == ["emu", "python3", "tmux"]
    emu, kv, tmux = specs
    assert (kv.pid, kv.descendants, [(p.address, p.port) for p in kv.ports]) == (30, 1, [("127.0.0.1", 7070)])
    assert (kv.stdout, kv.stderr, kv.env) == ("/var/log/kv.log", "-", {"PATH": "/usr/bin", "HOME": "/root"})
    # the harness's own output file is never reopened
    assert (emu.cwd, emu.stdout, emu.stderr, [p.port for p in emu.ports]) == ("/srv", None, None, [4555])
    assert tmux.ports == []


def test_declared_live_processes_are_up_when_they_or_a_descendant_listen_on_every_port():
    procs, listen = parse_capture(_capture())
    # the service listens on 7070 through its worker; emu on 4555; nothing on 9999
    assert declared_up(procs, listen, [("/opt/kv.py --config", [7070]), ("emu", [4555])])
    assert declared_up(procs, listen, [("emu", [])])
    assert not declared_up(procs, listen, [("emu", [4555, 9999])])
    assert not declared_up(procs, listen, [("defunct", [])])  # a zombie does not run
    assert not declared_up(procs, listen, [("keepalive-not-here", [])])


def test_hostile_capture_lines_are_skipped_or_decoded_defensively():
    text = (
        "P\t1\t2\nP\tx\ty\t0\t0\tz\tS\tq\t!!!\t@@@\t\t\t\t\t\t-\nT4\tgarbage\nT6\t0: zz:QQ x 0A a b c d e 1\n"
    )
    procs, listen = parse_capture(text)
    assert listen == {}
    assert list(procs) == [0] and procs[0].argv == [] and procs[0].pid == 0
    assert started_processes(procs, listen, set()) == []  # no command line: nothing to start


# -- digests and volatile paths -----------------------------------------------------------------------


def test_volatile_globs_match_paths_and_their_ancestors():
    assert is_volatile("/var/lib/apt/lists/deb.debian.org_InRelease", DEFAULT_VOLATILE)
    assert is_volatile(
        "/opt/venv/lib/python3.11/site-packages/x/__pycache__/y.cpython-311.pyc", DEFAULT_VOLATILE
    )
    assert is_volatile("/run/emu/web01.pid", DEFAULT_VOLATILE)
    assert is_volatile("/tmp/.swe-residual-out.XYZ", DEFAULT_VOLATILE)
    assert not is_volatile("/etc/kvstore/kvstore.conf", DEFAULT_VOLATILE)
    assert not is_volatile("/tmp/notes.txt", DEFAULT_VOLATILE)
    assert is_volatile("/var/log/kv/today.log", ["/var/log/kv"])
    assert not is_volatile("/var/log/kvx", ["/var/log/kv"])


def test_digests_of_two_replays_and_their_differences():
    a = parse_digests(
        b"f\t644\t0\t0\taaa\t/etc/x.conf\0d\t755\t0\t0\t-\t/srv/data\0l\t777\t0\t0\tccc\t/usr/bin/t\0"
    )
    assert a["/srv/data"] == "d 755 0 0 -"
    b = dict(a, **{"/etc/x.conf": "f 644 0 0 bbb"})
    del b["/usr/bin/t"]
    b["/srv/data/new"] = "f 600 0 0 ddd"
    assert tree_digest(a) == tree_digest(dict(a)) != tree_digest(b)
    assert differences(a, b) == [
        "/etc/x.conf: content differs",
        "/srv/data/new: absent vs f",
        "/usr/bin/t: l vs absent",
    ]
    assert differences(a, a) == []
    many = {f"/f{i}": "f 644 0 0 x" for i in range(12)}
    assert differences({}, many, limit=10)[-1] == "... 2 more paths"


def test_process_differences_compare_command_lines_cwd_user_and_ports():
    one = ProcessSpec(
        pid=5, argv=["emu", "-m", "128"], cwd="/", ports=[{"port": 4555, "address": "127.0.0.1"}]
    )
    same_other_pid = one.model_copy(update={"pid": 9})
    assert process_differences([one], [same_other_pid]) == []
    other = one.model_copy(update={"argv": ["emu", "-m", "512"]})
    assert process_differences([one], [other]) == [
        "live processes differ: only in the first replay ['emu -m 128'], only in the second ['emu -m 512']"
    ]


# -- states.yaml, track kind, backends ----------------------------------------------------------------


def _tb_states(tmp_path: Path, **artifact) -> tuple[Path, dict]:
    src = TB / "states" / "sales-report" / "top-level-only.interactions.jsonl"
    (tmp_path / "s").mkdir()
    shutil.copy(src, tmp_path / "s" / "i.jsonl")
    entry = {
        "id": "sales--x",
        "track": "terminal_bench",
        "task": "sales-report",
        "predecessor": {"agent": "a", "model_family": "f"},
        "artifact": {
            "interactions": "s/i.jsonl",
            "sha256": hashlib.sha256(src.read_bytes()).hexdigest(),
            **artifact,
        },
        "initial_verdict": {"failing_tests": ["t"]},
    }
    path = tmp_path / "states.yaml"
    path.write_text(yaml.safe_dump({"states": [entry]}))
    return path, {"terminal_bench": load_tasks(TB / "tasks", "terminal_bench")}


def test_machine_state_entries_load_and_wrong_artifacts_are_one_line_errors(tmp_path):
    path, tasks = _tb_states(tmp_path, live_processes=[{"match": "x.py", "ports": [80]}])
    [state] = load_states(path, tasks)
    assert (state.kind, state.patch, state.patch_path, state.changed_files) == ("machine", b"", None, [])
    assert [i.input for i in state.interactions][1].startswith("python3 /opt/jobs/summarize.py")
    data = yaml.safe_load(path.read_text())
    data["states"][0]["artifact"]["patch"] = "s/i.jsonl"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(
        InputError, match=r"artifact: Value error, give exactly one of patch .* or interactions"
    ):
        load_states(path, tasks)
    del data["states"][0]["artifact"]["patch"]
    data["states"][0]["artifact"]["live_processes"] = [{"match": "x", "ports": [70000]}]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(
        InputError, match=r"artifact.live_processes.0.ports: Value error, 70000 is no TCP port"
    ):
        load_states(path, tasks)
    # a repository task cannot take a machine state, nor the other way round
    data["states"][0]["artifact"] = {"patch": "s/i.jsonl", "sha256": data["states"][0]["artifact"]["sha256"]}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as err:
        load_states(path, tasks)
    assert str(err.value).endswith(
        "artifact.patch: task 'sales-report' is a machine task; its states need "
        "artifact.interactions (the replayed terminal interactions)"
    )
    (tmp_path / "s" / "i.jsonl").write_text("")
    data["states"][0]["artifact"] = {"interactions": "s/i.jsonl", "sha256": hashlib.sha256(b"").hexdigest()}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match=r"artifact.interactions: s/i.jsonl: no interactions in it$"):
        load_states(path, tasks)


def test_track_kind_and_legacy_sizes(tmp_path):
    cfg = load_track_config(TB)
    assert (cfg.kind, cfg.default_backend) == ("machine", "docker")
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "track.toml").write_text('kind = "machine"\ndefault_backend = "local"\n')
    with pytest.raises(InputError, match=r"track.toml: default_backend: a machine track needs \"docker\""):
        load_track_config(tmp_path / "t")
    (tmp_path / "t" / "track.toml").write_text('kind = "vm"\n')
    with pytest.raises(InputError, match=r"track.toml: kind: 'vm' is no track kind"):
        load_track_config(tmp_path / "t")
    tasks = load_tasks(TB / "tasks", "terminal_bench")
    assert {t.kind for t in tasks.values()} == {"machine"}
    assert {t.verify_mode for t in tasks.values()} == {"in_place"}
    # Terminal-Bench 2's older size strings
    task = tmp_path / "tb2"
    shutil.copytree(TB / "tasks" / "sales-report", task)
    toml = (task / "task.toml").read_text().replace("memory_mb = 1024", 'memory = "2G"\nstorage = "10G"')
    (task / "task.toml").write_text(toml)
    t = load_tasks(tmp_path, "terminal_bench")["sales-report"]
    assert (t.config.environment.memory_mb, t.config.environment.storage_mb) == (2048, 10240)
    (task / "task.toml").write_text(toml.replace('"2G"', '"lots"'))
    with pytest.raises(InputError, match=r"environment: Value error, environment.memory: 'lots' is no size"):
        load_tasks(tmp_path, "terminal_bench")


@pytest.mark.slow
def test_local_backend_refuses_machine_tracks_before_any_case(tmp_path):
    proc = run_suite("-q", suite=TB, backend="local", agents=["nop"], run_dir=tmp_path / "run")
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (
        "--backend local: task kv-service of track 'terminal_bench' is a machine task: the local backend cannot "
        "hold machine states (installed software, configuration, live processes), only a repository; use "
        "--backend docker"
    ) in proc.stderr
    assert not (tmp_path / "run").exists()


def test_a_forked_subshell_is_replaced_by_its_children_but_a_shell_loop_stays():
    lines = [
        _proc(1, 0, 10, ["bash", "-c", "keepalive"]),
        # `cd /opt && nohup python3 kv.py &` run by a command runner that has exited since
        _proc(30, 1, 60, ["bash", "-c", "cd /opt && nohup python3 kv.py & "]),
        _proc(31, 30, 61, ["python3", "kv.py"]),
        # a background list typed into a terminal: the subshell has its interactive parent's argv
        _proc(20, 1, 50, ["tmux", "-L", "swe-residual", "new-session"], comm="tmux: server"),
        _proc(21, 20, 51, ["bash", "--login"]),
        _proc(40, 21, 70, ["bash", "--login"]),
        _proc(41, 40, 71, ["emu", "-m", "512"]),
        # a shell loop is the service itself: recorded as it is, its sleep is a descendant
        _proc(50, 1, 80, ["bash", "-c", "while :; do date >> /var/log/tick; sleep 5; done"]),
        _proc(51, 50, 81, ["sleep", "5"]),
        # `sleep 100 &&` is no background list
        _proc(60, 1, 90, ["sh", "-c", "sleep 100 && echo done &&"]),
    ]
    procs, listen = parse_capture("\n".join(lines) + "\n")
    specs = started_processes(procs, listen, baseline={1})
    assert [(s.pid, s.argv[0], s.descendants) for s in specs] == [
        (31, "python3", 0),
        (41, "emu", 0),
        (50, "bash", 1),
        (60, "sh", 0),
    ]


def test_which_keystrokes_are_tmux_key_names():
    from swe_residual.backends.machine.terminal import KEY_NAME

    for name in ("C-c", "C-d", "M-x", "C-M-a", "Enter", "Escape", "Tab", "BSpace", "Up", "F12", "S-Tab"):
        assert KEY_NAME.fullmatch(name), name
    for text in ("ls -la\n", "C-c now", "q", "Enter\n", "F13", "", "echo C-c"):
        assert not KEY_NAME.fullmatch(text), text


def test_machine_track_metrics_count_tests_and_say_why_repository_measures_are_na():
    from swe_residual.report.bias.measures import MACHINE_NA
    from swe_residual.report.metrics import benchmark_statistics
    from swe_residual.results import Manifest, Record, StateFacts, TaskFacts

    tests = [f"test_outputs.t{i}" for i in range(6)]
    manifest = Manifest(
        tasks={"terminal_bench/kv": TaskFacts(track="terminal_bench", tests=tests)},
        states={
            "kv--a": StateFacts(
                track="terminal_bench",
                task="kv",
                patch="",
                predecessor={"agent": "x", "model_family": "f"},
                failing_tests=tests[:2],
            ),
            "kv--b": StateFacts(
                track="terminal_bench",
                task="kv",
                patch="",
                predecessor={"agent": "x", "model_family": "f"},
                failing_tests=tests[:3],
            ),
        },
    )
    stats = benchmark_statistics(manifest)["terminal_bench"]
    # pass rates 4/6 and 3/6, every state weighted equally: mean (0.667 + 0.5) / 2 = 0.583
    assert round(stats["pass_rate_mean"]["value"], 3) == round(stats["pass_rate_median"]["value"], 3) == 0.583
    assert stats["files_changed_median"] == {
        "value": None,
        "n": 0,
        "reason": "machine track: states are replayed interactions, not patches",
    }
    failed = {t: ("failed" if t in tests[:2] else "passed") for t in tests}
    rec = lambda **kw: Record(
        agent="a",
        track="terminal_bench",
        task="kv",
        verdict="fail",
        outcome=0,
        declared_complete=True,
        termination="submitted",
        rule="verdict",
        tests=failed,
        **kw,
    )
    records = [rec(case_id="c", start="clean"), rec(case_id="r", start="residual", state="kv--a")]
    from swe_residual.report.tables import build_report

    bias = build_report(records, manifest, n_boot=1)["acceptance_bias"]["terminal_bench"]["a"]
    # the continuation ends with exactly F(S_r) failing: same failing = 100 %
    assert bias["same_failing"]["value"] == 1.0
    for key in (
        "kept",
        "left_out_changed_clean",
        "left_out_changed_residual",
        "left_out_opened",
        "kept_split",
    ):
        assert (bias[key]["value"], bias[key]["reason"]) == (None, MACHINE_NA), key
    assert (
        bias["inspection_rate"]["reason"]
        == "machine track: no list of the files a state's predecessor changed"
    )
