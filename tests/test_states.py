"""states.yaml loading: every malformed entry ends in one line naming file, entry and field."""

from __future__ import annotations

import json

import pytest

from swe_residual.errors import InputError
from swe_residual.states import json_schema, load_states
from swe_residual.tasks import load_tasks

from .taskfactory import make_task, partial_state_patch, state_entry, write_states


@pytest.fixture
def setup(tmp_path):
    task_dir = make_task(tmp_path)
    entry = state_entry(tmp_path, task_dir, partial_state_patch(task_dir))
    return tmp_path, {"demo": load_tasks(tmp_path / "tasks", "demo")}, entry


def _error(tmp_path, tasks, entries) -> str:
    path = write_states(tmp_path, entries)
    with pytest.raises(InputError) as err:
        load_states(path, tasks)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{path}: ")
    return msg[len(f"{path}: "):]


def test_valid_file_loads(setup):
    tmp, tasks, entry = setup
    states = load_states(write_states(tmp, [entry]), tasks)
    assert [s.id for s in states] == ["calc--partial"]
    assert states[0].changed_files == ["NOTES.md", "calc.py", "logo.bin"] or set(states[0].changed_files) == {
        "NOTES.md", "calc.py", "logo.bin"}


def test_missing_field(setup):
    tmp, tasks, entry = setup
    del entry["predecessor"]
    assert _error(tmp, tasks, [entry]) == "states[0] (id 'calc--partial'): predecessor: Field required"


def test_wrong_hash(setup):
    tmp, tasks, entry = setup
    entry["artifact"]["sha256"] = "0" * 64
    msg = _error(tmp, tasks, [entry])
    assert msg.startswith("states[0] (id 'calc--partial'): artifact.sha256: does not match states/calc--partial.patch")


def test_unknown_task(setup):
    tmp, tasks, entry = setup
    entry["task"] = "nope"
    assert _error(tmp, tasks, [entry]) == "states[0] (id 'calc--partial'): task: unknown task 'nope' in track 'demo'"


def test_missing_artifact_and_duplicate_id(setup):
    tmp, tasks, entry = setup
    other = dict(entry, artifact={"patch": "states/none.patch", "sha256": "a" * 64}, id="other")
    assert "artifact.patch: file " in _error(tmp, tasks, [other])
    assert _error(tmp, tasks, [entry, entry]) == "states[1] (id 'calc--partial'): id: duplicate state id 'calc--partial'"


def test_invalid_yaml(setup):
    tmp, tasks, _ = setup
    path = tmp / "states.yaml"
    path.write_text("states: [\n  - id: x\n")
    with pytest.raises(InputError, match=r"states.yaml: line \d+ invalid YAML"):
        load_states(path, tasks)


def test_json_schema_lists_required_fields():
    schema = json_schema()
    state = schema["$defs"]["ResidualState"]
    assert set(state["required"]) >= {"id", "track", "task", "predecessor", "artifact", "initial_verdict"}
    json.dumps(schema)


def test_committed_json_schema_is_current():
    # states.schema.json is what editors and other tools validate states.yaml against
    from pathlib import Path
    committed = json.loads((Path(__file__).resolve().parent.parent / "states.schema.json").read_text())
    assert committed == json_schema(), "regenerate: swe-residual states-schema > states.schema.json"


def test_artifact_outside_the_states_dir_and_garbage_patches_are_rejected(tmp_path):
    import hashlib

    from swe_residual.errors import InputError
    from swe_residual.states import load_states
    from swe_residual.tasks import load_tasks

    from .taskfactory import make_task, partial_state_patch, state_entry, write_states

    task = make_task(tmp_path)
    tasks = {"demo": load_tasks(tmp_path / "tasks", "demo")}
    outside = tmp_path.parent / f"{tmp_path.name}-outside.patch"
    outside.write_bytes(partial_state_patch(task))
    escape = state_entry(tmp_path, task, b"x", state_id="escape")
    escape["artifact"] = {"patch": f"../{outside.name}", "sha256": hashlib.sha256(outside.read_bytes()).hexdigest()}
    with pytest.raises(InputError) as err:
        load_states(write_states(tmp_path, [escape]), tasks)
    assert "artifact.patch: ../" in str(err.value) and "outside" in str(err.value)
    assert hashlib.sha256(outside.read_bytes()).hexdigest() not in str(err.value)
    garbage = state_entry(tmp_path, task, bytes(range(256)) * 4, state_id="garbage")
    with pytest.raises(InputError, match=r"states\[0\] \(id 'garbage'\): artifact.patch: .* is not a git patch"):
        load_states(write_states(tmp_path, [garbage]), tasks)
