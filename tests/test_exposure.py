"""What an action showed the agent: one row per command form and per ATIF tool schema.

Candidates are always src/a.py and src/b.py; each row gives the command, its recorded output and
the files it opened (docs/metrics.md, "Opening a file"). The ATIF rows are trajectories written in
the published tool schemas (Anthropic's text editor and bash, Claude Code, OpenHands, Terminus,
Codex), imported and then asked the same question.
"""

from __future__ import annotations

import json

import pytest

from swe_residual.report.bias import analyze, exposed_files, inspected, opened_any, runs_git
from swe_residual.sources.trajectories import import_trajectory
from swe_residual.trajectory import Action

CANDS = ["src/a.py", "src/b.py"]
A, B, AB, NONE = {"src/a.py"}, {"src/b.py"}, {"src/a.py", "src/b.py"}, set()
DIFF_A = (
    "diff --git a/src/a.py b/src/a.py\nindex 1..2 100644\n--- a/src/a.py\n+++ b/src/a.py\n"
    "@@ -1 +1 @@\n-x = 1\n+x = 2\n"
)

SHELL = [
    # (command, output, cwd the harness started it in, expected)
    # git forms
    ("git show HEAD:src/a.py", "x = 1\n", None, A),
    ("git show HEAD~2:./a.py", "x = 1\n", "src", A),  # REV:./path is cwd-relative
    ("git show HEAD:src/a.py", "fatal: path 'src/a.py' does not exist in 'HEAD'\n", None, NONE),
    ("git log -p -3", "commit abc\nAuthor: x\n\n    msg\n\n" + DIFF_A, None, A),
    ("git log --oneline -- src/a.py", "abc123 fix\n", None, NONE),  # names only, no hunks
    ("git show HEAD", "commit abc\n\n" + DIFF_A, None, A),
    ("git show --stat HEAD", " src/a.py | 2 +-\n", None, NONE),
    ("git -C src grep -n 'x ='", "a.py:1:x = 1\n", None, A),  # git grep paths are cwd-relative
    ("git grep -n 'x =' HEAD -- src", "HEAD:src/b.py:1:x = 2\n", None, B),
    ("git grep -l x", "src/a.py\n", None, NONE),
    ("git blame -L 1,5 src/b.py", "^abc (me 2024-01-01 1) y = 2\n", None, B),
    ("git stash show -p", DIFF_A, None, A),
    (
        "git diff --no-index /tmp/old.py src/b.py",
        "diff --git a/tmp/old.py b/src/b.py\n--- a/tmp/old.py\n+++ b/src/b.py\n@@ -1 +1 @@\n-a\n+b\n",
        None,
        B,
    ),
    # interpreters
    ("python -c \"print(open('src/a.py').read())\"", "x = 1\n", None, A),
    ("python3 -c \"p = 'src/b.py'; print(open(p).read())\"", "y = 2\n", None, B),
    ("python3 -c 'import sys; print(open(sys.argv[1]).read())' src/a.py", "x = 1\n", None, A),
    ("python3 -c \"from pathlib import Path; print(Path('src/a.py').read_text())\"", "x = 1\n", None, A),
    ("python3 -c \"for p in ['src/a.py', 'src/b.py']: print(open(p).read())\"", "x\ny\n", None, AB),
    ("python3 - <<'EOF'\nwith open('src/b.py') as fh:\n    print(fh.read())\nEOF", "y = 2\n", None, B),
    (
        "python -c \"print(open('src/a.py').read())\"",
        (
            'Traceback (most recent call last):\n  File "<string>", line 1, in <module>\n'
            "FileNotFoundError: [Errno 2] No such file or directory: 'src/a.py'\n"
        ),
        None,
        NONE,
    ),
    ("python -c \"open('src/a.py', 'w').write('')\"", "", None, NONE),  # writing
    ("python -m json.tool src/a.py", "{}\n", None, A),
    ("node -e \"console.log(require('fs').readFileSync('src/b.py', 'utf8'))\"", "y\n", None, B),
    # file lists
    ("find src -name 'a.py' | xargs cat", "x = 1\n", None, A),
    ("find . -name '*.py' -print0 | xargs -0 cat", "x = 1\ny = 2\n", None, AB),
    ("find src -name '*.py' -exec cat {} \\;", "x = 1\n", None, AB),
    ("find src -name b.py -exec head -20 {} +", "y = 2\n", None, B),
    ("find src -type d -exec cat {} \\;", "cat: src: Is a directory\n", None, NONE),
    ("find src -name '*.py' | xargs grep -n 'y ='", "src/b.py:1:y = 2\n", None, B),
    ("echo src/b.py | xargs cat", "y = 2\n", None, B),
    ("ls src/*.py | xargs -I{} sh -c 'echo {}'", "src/a.py\n", None, NONE),  # names echoed, not content
    ("git ls-files src | xargs cat", "x = 1\ny = 2\n", None, AB),
    ("grep -rl 'x' src | xargs cat", "x = 1\n", None, NONE),  # which files matched is unknown
    ("grep -l 'x' src/a.py | xargs cat", "x = 1\n", None, A),
    ("cat $(find src -name a.py)", "x = 1\n", None, A),
    ("head -5 $(git ls-files 'src/*.py')", "==> src/a.py <==\nx\n", None, AB),
    ('for f in src/a.py; do echo "== $f"; cat "$f"; done', "== src/a.py\nx = 1\n", None, A),
    # nested shells and substitution
    ("bash -c 'cd src && cat a.py'", "x = 1\n", None, A),
    ("sh -c \"sed -n '1,5p' src/b.py\"", "y = 2\n", None, B),
    ("bash <<'EOF'\ncat src/a.py\nEOF", "x = 1\n", None, A),
    ('echo "$(cat src/b.py)"', "y = 2\n", None, B),
    ("x=$(cat src/b.py)", "", None, NONE),  # kept in a variable
    ("diff <(git show HEAD:src/a.py) src/a.py", "1c1\n< x = 1\n---\n> x = 2\n", None, A),
    ("timeout 10 env LC_ALL=C sudo -u app cat src/a.py", "x = 1\n", None, A),
    ("eval 'cat src/b.py'", "y = 2\n", None, B),
    # editors, dumps, diff
    ("vim -es -c 'set nu|%p' -c 'q!' src/a.py", "  1 x = 1\n", None, A),
    ("vim -es -c 'q!' src/a.py", "", None, NONE),  # nothing printed
    ("xxd src/a.py", "00000000: 7820 3d20 310a                 x = 1.\n", None, A),
    ("xxd src/a.py /tmp/dump", "", None, NONE),  # written to a file
    ("hexdump -C src/b.py | head", "00000000  79 20 3d 20 32 0a  |y = 2.|\n", None, B),
    ("od -c src/a.py", "0000000   x       =       1  \\n\n", None, A),
    ("diff src/a.py src/b.py", "1c1\n< x = 1\n---\n> y = 2\n", None, AB),
    ("diff -u src/a.py src/b.py", "--- src/a.py\n+++ src/b.py\n@@ -1 +1 @@\n-x = 1\n+y = 2\n", None, AB),
    ("diff src/a.py src/a.py.orig", "", None, NONE),  # identical: nothing shown
    ("diff -q src/a.py src/b.py", "Files src/a.py and src/b.py differ\n", None, NONE),
    ("sort -u src/a.py", "x = 1\n", None, A),
    ("cut -d= -f2 src/b.py", " 2\n", None, B),
    ("jq . src/a.py", "{}\n", None, A),
    ("perl -ne 'print if /x/' src/a.py", "x = 1\n", None, A),
    ("perl -pi -e 's/x/y/' src/a.py", "", None, NONE),  # in-place edit
    # working directories: within the command line and from the harness's session
    ("cd src && grep -n 'x' *.py", "a.py:1:x = 1\n", None, A),  # grep output after a cd
    ("cd src; grep -rn 'y' .", "./b.py:1:y = 2\n", None, B),
    ("cd /app/src && cat ../src/b.py", "y = 2\n", None, B),
    ("(cd src && cat a.py)", "x = 1\n", None, A),
    ("cat a.py", "x = 1\n", "src", A),  # the session was in src
    ("cat a.py", "x = 1\n", "/app/src", A),
    ("cat a.py", "x = 1\n", None, NONE),  # another a.py
    ("cd tests && cat a.py", "x = 1\n", "src", NONE),  # src/tests/a.py
    ("pushd src >/dev/null; cat b.py; popd", "y = 2\n", None, B),
    # terminal screens (Terminus): prompts echo the command, they are not content
    ("cat src/a.py", "root@c0ffee:/app# cat src/a.py\nx = 1\nroot@c0ffee:/app# ", None, A),
    ("grep -n zzz src/a.py", "root@c0ffee:/app# grep -n zzz src/a.py\nroot@c0ffee:/app# ", None, NONE),
    (
        "cat src/a.py",
        "root@c0ffee:/app# cat src/a.py\ncat: src/a.py: No such file or directory\n",
        None,
        NONE,
    ),
    # mentions a path without reading it
    ("ls src/a.py", "src/a.py\n", None, NONE),
    ("ls -la src", "a.py\nb.py\n", None, NONE),
    ("rm src/a.py", "", None, NONE),
    ("echo src/a.py > y", "", None, NONE),
    ("echo 'cat src/a.py'", "cat src/a.py\n", None, NONE),
    ("touch src/a.py && chmod +x src/b.py", "", None, NONE),
    ("cp src/a.py /tmp/ && mv src/b.py src/c.py", "", None, NONE),
    ("wc -l src/a.py", "1 src/a.py\n", None, NONE),
    ("stat src/a.py; file src/b.py; md5sum src/a.py", "src/a.py: ASCII text\n", None, NONE),
    ("test -f src/a.py && echo yes", "yes\n", None, NONE),
    ("python src/a.py", "hello\n", None, NONE),  # ran it, output is its own
    ("python -m pytest src/b.py -q", "1 passed\n", None, NONE),
    ("git add src/a.py && git commit -m fix", "[main abc] fix\n 1 file changed\n", None, NONE),
    ("git checkout -- src/a.py", "Updated 1 path from the index\n", None, NONE),
    ("cat > src/a.py <<'EOF'\nx = 1\nEOF", "", None, NONE),
    ("tee src/b.py <<< 'y = 2'", "y = 2\n", None, NONE),  # prints what it writes
    ("cat src/a.py 2>&1 | grep -c x", "1\n", None, NONE),
    ("cat src/a.py &> /tmp/log", "", None, NONE),
    ("{ cat src/a.py; cat src/b.py; } > /tmp/both", "", None, NONE),
    ("grep -q x src/a.py || cat src/b.py", "y = 2\n", None, B),
    ("sed -i 's/x/y/' src/a.py && echo ok", "ok\n", None, NONE),
]


@pytest.mark.parametrize(
    "command,output,cwd,expected", SHELL, ids=[f"{i}:{r[0][:40]}" for i, r in enumerate(SHELL)]
)
def test_shell_command_forms(command, output, cwd, expected):
    assert exposed_files(Action(command=command, output=output, cwd=cwd), CANDS) == expected


def test_analyze_is_cached_per_command_and_never_raises():
    assert analyze("cat src/a.py") is analyze("cat src/a.py")
    for broken in (
        "cat 'src/a.py",
        "echo $(cat src/a.py",
        "cat <<EOF\nno end",
        "((",
        "}}{{",
        ")(",
        "`",
        "\\",
        "for",
        "for x in; do",
        "a" * 5000 + " | cat src/a.py",
        "$'\\",
        "cat <(",
        "if then fi",
    ):
        analyze(broken)  # best effort, no exception


def test_session_cwd_within_and_across_commands():
    assert analyze("cd src && ls").cwd == "src"
    assert analyze("cd src; cd ../tests").cwd == "tests"
    assert analyze("(cd src); ls").cwd == ""  # a subshell's cd does not leak
    assert analyze("cd /app/src && cd -").cwd == ""  # back where it started
    assert analyze("bash -c 'cd src'").cwd == ""  # a child shell
    assert analyze("ls", "src").cwd == "src"


def test_runs_git_status_or_diff_in_any_form():
    assert runs_git(Action(command="git status --short"))
    assert runs_git(Action(command="cd /app && git -C . diff --stat"))
    assert runs_git(Action(command="bash -c 'git --no-pager diff HEAD'"))
    assert runs_git(Action(command="for f in $(git diff --name-only); do echo $f; done"))
    assert not runs_git(Action(command="git log --oneline"))
    assert not runs_git(Action(command="echo 'git diff'"))
    assert not runs_git(Action(command="git status", kind="tool"))


# -- ATIF tool schemas -------------------------------------------------------------------------------


def atif(*steps: dict, agent: str = "some-harness") -> dict:
    return {
        "schema_version": "ATIF-v1.4",
        "session_id": "s",
        "agent": {"name": agent, "version": "1"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "fix it"},
            *({"step_id": i + 2, "source": "agent", "message": "", **s} for i, s in enumerate(steps)),
        ],
    }


def call(name: str, args: dict, output: str | None, cid: str = "c1") -> dict:
    step: dict = {"tool_calls": [{"tool_call_id": cid, "function_name": name, "arguments": args}]}
    if output is not None:
        step["observation"] = {"results": [{"source_call_id": cid, "content": output}]}
    return step


def actions(data: dict) -> list[Action]:
    traj = import_trajectory(data, "agent")
    assert traj is not None
    return [a for s in traj.steps for a in s.actions]


VIEW_A = "     1\tx = 1\n"
SCHEMAS = [
    # (tool call step(s), expected (kind, path) of the first action, files opened by the trajectory)
    (
        [call("str_replace_based_edit_tool", {"command": "view", "path": "/app/src/a.py"}, VIEW_A)],
        ("view", "/app/src/a.py"),
        A,
    ),
    (
        [
            call(
                "str_replace_based_edit_tool",
                {"command": "view", "path": "/app/src/a.py"},
                "Error: The path /app/src/a.py does not exist.",
            )
        ],
        ("view", "/app/src/a.py"),
        NONE,
    ),
    (
        [
            call(
                "str_replace_based_edit_tool",
                {"command": "create", "path": "/app/src/b.py", "file_text": "y"},
                "File created successfully",
            )
        ],
        ("edit", "/app/src/b.py"),
        NONE,
    ),
    (
        [
            call(
                "str_replace_editor",
                {"command": "str_replace", "path": "/app/src/a.py", "old_str": "x", "new_str": "y"},
                "The file /app/src/a.py has been edited.",
            )
        ],
        ("edit", "/app/src/a.py"),
        NONE,
    ),
    (
        [
            call(
                "str_replace_editor",
                {"command": "view", "path": "/app/src/b.py", "view_range": [1, 5]},
                "Here's the result of running `cat -n` on /app/src/b.py:\n     1\ty = 2\n",
            )
        ],
        ("view", "/app/src/b.py"),
        B,
    ),
    (
        [
            call(
                "str_replace_editor",
                {"command": "view", "path": "/app/src"},  # a directory listing
                "Here's the files and directories up to 2 levels deep in /app/src:\n/app/src\n/app/src/a.py\n",
            )
        ],
        ("view", "/app/src"),
        NONE,
    ),
    (
        [
            call(
                "file_editor",
                {"command": "view", "path": "/app/src/x.py"},
                "ERROR:\nInvalid `path` parameter: /app/src/x.py. The path /app/src/x.py does not exist.",
            )
        ],
        ("view", "/app/src/x.py"),
        NONE,
    ),
    (
        [call("str_replace_editor", {"command": "undo_edit", "path": "/app/src/a.py"}, "Last edit undone")],
        ("edit", "/app/src/a.py"),
        NONE,
    ),
    # Claude Code
    (
        [call("Read", {"file_path": "/app/src/a.py", "offset": 1, "limit": 20}, VIEW_A)],
        ("view", "/app/src/a.py"),
        A,
    ),
    (
        [
            call(
                "Read",
                {"file_path": "/app/src/a.py"},
                "<tool_use_error>File does not exist.</tool_use_error>",
            )
        ],
        ("view", "/app/src/a.py"),
        NONE,
    ),
    (
        [call("Edit", {"file_path": "/app/src/a.py", "old_string": "x", "new_string": "y"}, "ok")],
        ("edit", "/app/src/a.py"),
        NONE,
    ),
    ([call("MultiEdit", {"file_path": "/app/src/a.py", "edits": []}, "ok")], ("edit", "/app/src/a.py"), NONE),
    (
        [call("Write", {"file_path": "/app/src/b.py", "content": "y = 2\n"}, "ok")],
        ("edit", "/app/src/b.py"),
        NONE,
    ),
    (
        [
            call(
                "Grep",
                {"pattern": "y =", "path": "/app/src", "output_mode": "content", "-n": True},
                "/app/src/b.py:1:y = 2\n",
            )
        ],
        ("shell", None),
        B,
    ),
    ([call("Grep", {"pattern": "y =", "path": "/app/src"}, "/app/src/b.py\n")], ("shell", None), NONE),
    ([call("Glob", {"pattern": "**/*.py"}, "/app/src/a.py\n/app/src/b.py\n")], ("shell", None), NONE),
    ([call("LS", {"path": "/app/src"}, "- a.py\n- b.py\n")], ("shell", None), NONE),
    (
        [
            call("Bash", {"command": "cd src", "description": "go"}, ""),  # Claude Code keeps the cwd
            call("Bash", {"command": "cat b.py"}, "y = 2\n"),
        ],
        ("shell", None),
        B,
    ),
    ([call("TodoWrite", {"todos": [{"content": "cat src/a.py"}]}, "ok")], ("tool", None), NONE),
    # Anthropic bash tool and OpenHands: one shell session
    (
        [call("bash", {"command": "cd /app/src"}, ""), call("bash", {"command": "head a.py"}, "x = 1\n")],
        ("shell", None),
        A,
    ),
    (
        [
            call("execute_bash", {"command": "cd src && ls", "is_input": "false"}, "a.py b.py\n"),
            call("execute_bash", {"command": "cat a.py"}, "x = 1\n"),
        ],
        ("shell", None),
        A,
    ),
    (
        [call("execute_bash", {"command": "cat src/a.py", "is_input": "true"}, "x = 1\n")],
        ("tool", None),
        NONE,
    ),
    ([call("terminal", {"command": "sed -n 1,3p src/b.py"}, "y = 2\n")], ("shell", None), B),
    # Harbor's mini-swe-agent conversion: no session, each command starts at the root
    (
        [
            call("bash_command", {"command": "cd src"}, ""),
            call("bash_command", {"command": "cat a.py"}, "x = 1\n"),
        ],
        ("shell", None),
        NONE,
    ),
    # Codex: argv list and workdir
    (
        [call("shell", {"command": ["bash", "-lc", "cat b.py"], "workdir": "/app/src"}, "y = 2\n")],
        ("shell", None),
        B,
    ),
    ([call("shell", {"command": ["cat", "src/a.py"]}, "x = 1\n")], ("shell", None), A),
    # Gemini CLI
    ([call("read_file", {"absolute_path": "/app/src/b.py"}, "y = 2\n")], ("view", "/app/src/b.py"), B),
    ([call("run_shell_command", {"command": "cat src/a.py"}, "x = 1\n")], ("shell", None), A),
]


@pytest.mark.parametrize(
    "steps,first,expected",
    SCHEMAS,
    ids=[f"{i}:{r[0][0]['tool_calls'][0]['function_name']}" for i, r in enumerate(SCHEMAS)],
)
def test_atif_tool_schemas(steps, first, expected):
    data = atif(*steps)
    acts = actions(data)
    assert (acts[0].kind, acts[0].path) == first
    traj = import_trajectory(data, "agent")
    assert {f for f in CANDS if opened_any(traj, [f])} == expected


def test_results_are_matched_by_source_call_id_not_order():
    step = {
        "tool_calls": [
            {"tool_call_id": "one", "function_name": "bash", "arguments": {"command": "cat src/a.py"}},
            {"tool_call_id": "two", "function_name": "bash", "arguments": {"command": "cat src/b.py"}},
        ],
        "observation": {
            "results": [
                {"source_call_id": "two", "content": "cat: src/b.py: No such file or directory"},
                {"source_call_id": "one", "content": [{"type": "text", "text": "x = 1"}]},
            ]
        },
    }
    a, b = actions(atif(step))
    assert (a.command, a.output) == ("cat src/a.py", "x = 1")
    assert b.output.startswith("cat: src/b.py")
    traj = import_trajectory(atif(step), "agent")
    assert opened_any(traj, ["src/a.py"]) and not opened_any(traj, ["src/b.py"])


def terminus(*keystrokes: str, screen: str, raw: bool = False) -> dict:
    """One Terminus-2 step: bash_command calls and one terminal screen for all of them (or, with
    raw content kept, the JSON response in the message and no tool calls)."""
    if raw:
        message = json.dumps(
            {
                "analysis": "",
                "plan": "",
                "commands": [{"keystrokes": k, "duration": 0.1} for k in keystrokes],
                "task_complete": False,
            }
        )
        return {"message": f"```json\n{message}\n```", "observation": {"results": [{"content": screen}]}}
    calls = [
        {
            "tool_call_id": f"call_0_{i}",
            "function_name": "bash_command",
            "arguments": {"keystrokes": k, "duration": 0.1},
        }
        for i, k in enumerate(keystrokes)
    ]
    calls.append(
        {"tool_call_id": "call_0_task_complete", "function_name": "mark_task_complete", "arguments": {}}
    )
    return {"tool_calls": calls, "observation": {"results": [{"content": screen}]}}


TERMINUS = [
    # (steps, expected shell commands run, files opened)
    (
        [
            terminus(
                "cd src\n", "cat a.py\n", screen="root@h:/app# cd src\nroot@h:/app/src# cat a.py\nx = 1\n"
            )
        ],
        ["cd src\ncat a.py"],
        A,
    ),
    (
        [
            terminus("cd src\n", screen="root@h:/app/src# "),  # the session keeps src
            terminus("cat b.py\n", screen="root@h:/app/src# cat b.py\ny = 2\n"),
        ],
        ["cd src", "cat b.py"],
        B,
    ),
    ([terminus("cat src/a.py", "Enter", screen="root@h:/app# cat src/a.py\nx = 1\n")], ["cat src/a.py"], A),
    ([terminus("less src/b.py\n", "q", "C-c", screen="y = 2\n(END)\n")], ["less src/b.py"], B),
    (
        [terminus("vim src/a.py", "C-c", "cat src/b.py\n", screen="root@h:/app# cat src/b.py\ny = 2\n")],
        ["cat src/b.py"],
        B,
    ),  # C-c dropped the typed line
    (
        [terminus("grep -n zzz src/a.py\n", screen="root@h:/app# grep -n zzz src/a.py\nroot@h:/app# ")],
        ["grep -n zzz src/a.py"],
        NONE,
    ),
    (
        [terminus("cat src/a.py\n", screen="root@h:/app# cat src/a.py\nx = 1\n", raw=True)],
        ["cat src/a.py"],
        A,
    ),
]


@pytest.mark.parametrize("steps,commands,expected", TERMINUS, ids=[str(i) for i in range(len(TERMINUS))])
def test_terminus_keystrokes(steps, commands, expected):
    data = atif(*steps, agent="terminus-2")
    shell = [a for a in actions(data) if a.kind == "shell"]
    assert [a.command for a in shell] == commands
    traj = import_trajectory(data, "agent")
    assert {f for f in CANDS if opened_any(traj, [f])} == expected


def test_terminus_session_cwd_is_recorded_per_action():
    data = atif(
        terminus("cd /app/src\n", screen=""), terminus("cat a.py\n", screen="x = 1\n"), agent="terminus-2"
    )
    first, second = [a for a in actions(data) if a.kind == "shell"]
    assert first.cwd is None and second.cwd == "/app/src"


def test_inspection_through_tool_calls():
    # reading a predecessor file with the editor counts; editing it does not
    read = import_trajectory(atif(call("Read", {"file_path": "/app/src/a.py"}, VIEW_A)), "agent")
    edit = import_trajectory(
        atif(call("Edit", {"file_path": "/app/src/a.py", "old_string": "x", "new_string": "y"}, "ok")),
        "agent",
    )
    assert inspected(read, ["src/a.py"]) and not inspected(edit, ["src/a.py"])
