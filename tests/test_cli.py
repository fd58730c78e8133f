"""The ``tickwork`` command, run as users run it: ``python -m tickwork.cli ...`` in a
subprocess, with the example workflows of ``tests/cli_fixtures``.

What is checked: the result on stdout, progress on stderr, the exit status, and for each
error exactly one ``tickwork: error:`` line.  The many error cases call ``main()``
in-process (the same code, without a second of interpreter start-up each); a few of them
also run as a process to prove the exit status reaches the shell.
"""

from __future__ import annotations

import io
import json
import re
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from tests.cli_fixtures.commands import FLOWS, ROOT, single_error, tickwork

from tickwork.cli import CliError, main, parse_assignments

# --- tickwork run ------------------------------------------------------------------------


def test_run_prints_the_result_as_json_and_progress_on_stderr() -> None:
    proc = tickwork("run", f"{FLOWS}:Greet", "name=Ada", "times=2")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"greeting": "hello Ada hello Ada"}
    lines = proc.stderr.splitlines()
    assert re.fullmatch(r"\[run\] \w{10} started: tests\.cli_fixtures\.flows\.Greet", lines[0])
    assert "[hello:0] running (StartEvent)" in lines
    assert "[hello:0] done -> StopEvent" in lines
    assert re.fullmatch(r"\[run\] \w{10} completed in \d+\.\d\ds", lines[-1])
    assert "\x1b[" not in proc.stderr  # no colour when stderr is not a terminal


def test_key_value_arguments_are_json_when_they_parse_else_strings() -> None:
    proc = tickwork(
        "run",
        f"{FLOWS}:Echo",
        "count=3",
        "name=Ada",
        "ok=true",
        "nothing=null",
        'tags=["a", 2]',
        'opts={"k": 1.5}',
        'quoted="3"',
        "empty=",
        "-q",
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "count": ["int", 3],
        "name": ["str", "Ada"],
        "ok": ["bool", True],
        "nothing": ["NoneType", None],
        "tags": ["list", ["a", 2]],
        "opts": ["dict", {"k": 1.5}],
        "quoted": ["str", "3"],
        "empty": ["str", ""],
    }
    assert proc.stderr == ""  # --quiet


def test_fan_out_progress_events_and_queueing_are_reported() -> None:
    proc = tickwork("run", f"{FLOWS}:Shout", "sentence=hello big world of words")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == "HELLO BIG WORLD OF WORDS"
    lines = proc.stderr.splitlines()
    assert "[split:0] done -> list[Word]" in lines
    assert lines.count("[shout] queued (Word)") == 3  # two workers for five words
    for word in ["hello", "big", "world", "of", "words"]:
        assert f"[event] Progress(message='shouted {word}')" in lines
    progress = [
        tuple(map(int, m.groups()))
        for line in lines
        if (m := re.fullmatch(r"\[fan-out split -> join\] (\d+)/(\d+)", line))
    ]
    assert progress[0] == (0, 5)  # seen as soon as the fan-out returned
    assert progress[-1] == (5, 5)
    assert all(total == 5 for _, total in progress)
    assert [done for done, _ in progress] == sorted({done for done, _ in progress})
    # The counter counts what is done: after each "done" line of a branch, as many as
    # there were such lines (never ahead of them).
    branches_done = 0
    for line in lines:
        if line.startswith("[shout:") and line.endswith("done -> Loud"):
            branches_done += 1
        elif m := re.fullmatch(r"\[fan-out split -> join\] (\d+)/5", line):
            assert int(m[1]) == branches_done, proc.stderr
    assert branches_done == 5
    # A join's input is what the step's signature says, with the batch size.
    assert lines.index("[fan-out split -> join] 5/5") < lines.index(
        "[join:0] running (list[Loud] of 5)"
    )


def test_a_typed_stop_event_is_printed_as_json_and_other_results_as_repr() -> None:
    typed = tickwork("run", f"{FLOWS}:Count", "names=[1, 2, 3]", "-q")
    assert typed.returncode == 0, typed.stderr
    assert json.loads(typed.stdout) == {"total": 3}
    opaque = tickwork("run", f"{FLOWS}:Opaque", "-q")
    assert opaque.returncode == 0, opaque.stderr
    assert opaque.stdout == "frozenset({'only'})\n"


def test_run_under_trio_and_with_a_workflow_instance() -> None:
    trio_run = tickwork("run", f"{FLOWS}:Greet", "name=Bo", "--backend", "trio", "-q")
    assert trio_run.returncode == 0, trio_run.stderr
    assert json.loads(trio_run.stdout) == {"greeting": "hello Bo"}
    instance_run = tickwork("run", f"{FLOWS}:shout_instance", "sentence=hi there", "-q")
    assert instance_run.returncode == 0, instance_run.stderr
    assert json.loads(instance_run.stdout) == "HI THERE"


def test_human_input_is_read_as_json_from_stdin() -> None:
    proc = tickwork("run", f"{FLOWS}:Review", 'topics=["a", "b"]', stdin='{"approved": true}\n')
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) is True
    lines = proc.stderr.splitlines()
    assert "[input] AskApproval(text='all about a\\nall about b')" in lines
    assert "[input] reading the answer with Approval as JSON (approved) from stdin" in lines
    assert "[decide:0] done -> StopEvent" in lines
    # a one-field answer may be given bare
    bare = tickwork("run", f"{FLOWS}:Review", 'topics=["a"]', "-q", stdin="false\n")
    assert bare.returncode == 0, bare.stderr
    assert json.loads(bare.stdout) is False


def test_module_files_and_modules_in_the_current_directory_can_be_run(tmp_path: Path) -> None:
    (tmp_path / "myflow.py").write_text(
        "from tickwork import StartEvent, StopEvent, Workflow, step\n\n\n"
        "class Double(Workflow):\n"
        "    @step\n"
        "    async def double(self, ev: StartEvent) -> StopEvent:\n"
        "        return StopEvent(result=ev.x * 2)\n",
        encoding="utf-8",
    )
    by_name = tickwork("run", "myflow:Double", "x=21", "-q", cwd=tmp_path)
    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout == "42\n"
    by_path = tickwork("run", str(tmp_path / "myflow.py") + ":Double", "x=[1]", "-q")
    assert by_path.returncode == 0, by_path.stderr
    assert json.loads(by_path.stdout) == [1, 1]


# --- journal: run --journal, runs list / show / resume -----------------------------------


def test_journaled_runs_can_be_listed_and_shown(tmp_path: Path) -> None:
    journal = str(tmp_path / "runs.db")
    first = tickwork("run", f"{FLOWS}:Shout", "sentence=a b", "--journal", journal, "-q")
    assert first.returncode == 0, first.stderr
    second = tickwork("run", f"{FLOWS}:Greet", "name=Ada", "--journal", journal)
    assert second.returncode == 0, second.stderr
    run_id = re.search(r"\[run\] (\w+) started", second.stderr)
    assert run_id is not None

    listed = tickwork("runs", "list", "--journal", journal, "--json")
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)
    assert {(e["workflow"], e["status"]) for e in entries} == {
        ("tests.cli_fixtures.flows.Shout", "completed"),
        ("tests.cli_fixtures.flows.Greet", "completed"),
    }
    assert all(e["last_seq"] > 0 for e in entries)

    assert all(e["created_at"] <= e["updated_at"] for e in entries)
    assert all(abs(time.time() - e["updated_at"]) < 600 for e in entries)

    table = tickwork("runs", "list", "--journal", journal)
    assert table.returncode == 0, table.stderr
    rows = table.stdout.splitlines()
    assert rows[0].split() == [
        "RUN", "ID", "WORKFLOW", "STATUS", "STARTED", "LAST", "ACTIVITY", "LAST", "SEQ"
    ]  # fmt: skip
    greet_row = next(row.split() for row in rows if row.startswith(run_id[1]))
    assert greet_row[:3] == [run_id[1], "tests.cli_fixtures.flows.Greet", "completed"]
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    assert re.fullmatch(rf"{stamp} {stamp}", " ".join(greet_row[3:7]))

    shown = tickwork("runs", "show", run_id[1], "--journal", journal, "--json")
    assert shown.returncode == 0, shown.stderr
    summary = json.loads(shown.stdout)
    assert summary["run_id"] == run_id[1]
    assert summary["status"] == "completed"
    assert summary["snapshot"]["is_running"] is False
    assert summary["snapshot"]["steps"] == {"hello": {}}
    assert summary["snapshot"]["open_streams"] == {}

    assert summary["current"]["activity"] == "completed"
    assert summary["error"] is None

    text = tickwork("runs", "show", run_id[1], "--journal", journal)
    assert text.returncode == 0, text.stderr
    assert f"run:           {run_id[1]}" in text.stdout
    assert "status:        completed" in text.stdout
    assert "activity:      completed" in text.stdout


def test_a_crashed_run_is_listed_as_running_and_resumed_to_completion(tmp_path: Path) -> None:
    journal = str(tmp_path / "runs.db")
    marker = str(tmp_path / "crashed")
    crashed = tickwork("run", f"{FLOWS}:Crashy", f"marker={marker}", "--journal", journal)
    assert crashed.returncode == 17, crashed.stderr  # the step killed the process
    run_id = re.search(r"\[run\] (\w+) started", crashed.stderr)
    assert run_id is not None

    listed = json.loads(tickwork("runs", "list", "--journal", journal, "--json").stdout)
    assert [(e["run_id"], e["status"]) for e in listed] == [(run_id[1], "running")]
    shown = tickwork("runs", "show", run_id[1], "--journal", journal)
    assert "status:        running" in shown.stdout
    # its current state: the crashed invocation is still in progress
    assert "activity:      interrupted (1 running, 0 queued): resume it to go on" in shown.stdout
    assert "running:       fragile:0 (Ready)" in shown.stdout
    assert re.search(r"journal: .*, [1-9] records after it", shown.stdout)

    resumed = tickwork(
        "runs", "resume", run_id[1], "--journal", journal, "--workflow", f"{FLOWS}:Crashy"
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == "recovered"
    assert f"[run] {run_id[1]} resumed: tests.cli_fixtures.flows.Crashy" in resumed.stderr
    assert "[fragile:0] done -> StopEvent" in resumed.stderr

    after = json.loads(tickwork("runs", "list", "--journal", journal, "--json").stdout)
    assert [(e["run_id"], e["status"]) for e in after] == [(run_id[1], "completed")]
    again = tickwork(
        "runs", "resume", run_id[1], "--journal", journal, "--workflow", f"{FLOWS}:Crashy"
    )
    assert again.returncode == 2
    assert (
        single_error(again) == f"run {run_id[1]!r} already finished (completed); nothing to resume"
    )


# --- tickwork draw -----------------------------------------------------------------------


def test_draw_writes_mermaid_and_html_files(tmp_path: Path) -> None:
    mermaid = tmp_path / "review.mmd"
    page = tmp_path / "review.html"
    for target in (mermaid, page):
        proc = tickwork("draw", f"{FLOWS}:Review", "-o", str(target))
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == f"[draw] wrote {target}\n"
    text = mermaid.read_text(encoding="utf-8")
    assert text.startswith("flowchart TD\n")
    assert 'step_plan ==>|"list[Draft]"| event_Draft' in text
    assert 'step_plan -.->|"join list[Section]"| step_assemble' in text
    assert 'step_write -.->|"on failure"| step_recover' in text
    html = page.read_text(encoding="utf-8")
    assert 'data-node-id="external_step"' in html
    assert "http://" not in html and "https://" not in html


def test_draw_without_output_prints_mermaid_for_an_instance_too() -> None:
    proc = tickwork("draw", f"{FLOWS}:shout_instance")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("flowchart TD\n")
    assert 'step_split -.->|"join list[Loud]"| step_join' in proc.stdout


# --- errors: one line, the right status ---------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "status", "message"),
    [
        (
            ("run", "no_such_module.flows:Flow"),
            2,
            "cannot import module 'no_such_module.flows': no module named 'no_such_module'",
        ),
        (
            ("run", f"{FLOWS}:Missing"),
            2,
            "module 'tests.cli_fixtures.flows' has no attribute 'Missing'",
        ),
        (
            ("run", f"{FLOWS}:NOT_A_WORKFLOW"),
            2,
            "tests.cli_fixtures.flows:NOT_A_WORKFLOW is not a Workflow class or instance "
            "(got int 42)",
        ),
        (
            ("run", f"{FLOWS}:Client"),
            2,
            "tests.cli_fixtures.flows:Client is not a Workflow class or instance (got class "
            "<class 'tests.cli_fixtures.flows.Client'>)",
        ),
        (
            ("run", FLOWS),
            2,
            "expected MODULE:WORKFLOW, got 'tests.cli_fixtures.flows' "
            "(for example myapp.flows:MyFlow)",
        ),
        (
            ("run", f"{FLOWS}:Greet", "name"),
            2,
            "bad argument 'name': expected key=value with an identifier as key "
            "(for example name=Ada or count=3)",
        ),
        (
            ("run", f"{FLOWS}:Greet", "my-name=Ada"),
            2,
            "bad argument 'my-name=Ada': expected key=value with an identifier as key "
            "(for example name=Ada or count=3)",
        ),
        (
            ("run", f"{FLOWS}:Greet", "name=a", "name=b"),
            2,
            "bad argument 'name=b': 'name' is given twice",
        ),
        (
            ("run", f"{FLOWS}:shout_instance", "--timeout", "3"),
            2,
            "--timeout needs a Workflow class, but tests.cli_fixtures.flows:shout_instance is "
            "an instance; name the class or configure the instance where it is created",
        ),
        (
            ("draw", f"{FLOWS}:Review", "-o", "review.png"),
            2,
            "cannot draw a workflow to 'review.png': unknown file extension '.png'; use .mmd "
            "for Mermaid or .html for a self-contained page",
        ),
        (
            ("runs", "list", "--journal", "does-not-exist.db"),
            2,
            "no journal at 'does-not-exist.db'",
        ),
        (
            ("runs", "list", "--journal", "."),
            2,
            "journal '.' is a directory; give the path of a file, e.g. 'runs.db'",
        ),
        (
            ("run", f"{FLOWS}:Greet", "name=Ada", "--journal", "no-such-dir/runs.db"),
            2,
            "journal 'no-such-dir/runs.db': the directory 'no-such-dir' does not exist; create "
            "it first or choose another path",
        ),
    ],
    ids=[
        "module-not-found",
        "attribute-missing",
        "not-a-workflow",
        "a-class-but-not-a-workflow",
        "no-colon",
        "no-equals",
        "bad-key",
        "duplicate-key",
        "timeout-on-instance",
        "draw-bad-extension",
        "journal-missing",
        "journal-is-a-directory",
        "journal-directory-missing",
    ],
)
def test_usage_errors_are_one_line_with_status_2(
    arguments: tuple[str, ...],
    status: int,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path if arguments[0] in ("runs", "draw") else ROOT)
    assert main(list(arguments)) == status
    assert single_error(capsys.readouterr()) == message
    assert list(tmp_path.iterdir()) == []  # nothing was created (no journal, no drawing)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("run", "no_such_module:Flow"), "cannot import module 'no_such_module'"),
        (("run", f"{FLOWS}:Greet", "oops"), "bad argument 'oops'"),
        (
            ("run", f"{FLOWS}:Greet", "name=Ada", "--journal", "/nonexistent/dir/x.db"),
            "journal '/nonexistent/dir/x.db': the directory '/nonexistent/dir' does not exist",
        ),
        (("runs", "list", "--journal", "/nonexistent/dir/x.db"), "no journal at"),
    ],
)
def test_usage_errors_exit_the_process_with_status_2(
    arguments: tuple[str, ...], message: str
) -> None:
    proc = tickwork(*arguments)
    assert proc.returncode == 2
    assert single_error(proc).startswith(message)


def test_unknown_runs_and_resume_mistakes_are_usage_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    journal = str(tmp_path / "runs.db")
    assert main(["run", f"{FLOWS}:Greet", "name=Ada", "--journal", journal, "-q"]) == 0
    assert main(["runs", "list", "--journal", journal, "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out.split("\n", 1)[1])  # after the result line

    assert main(["runs", "show", "nope", "--journal", journal]) == 2
    assert single_error(capsys.readouterr()) == f"no run 'nope' in journal {journal!r}"

    resume = ["runs", "resume", "nope", "--journal", journal, "--workflow", f"{FLOWS}:Greet"]
    assert main(resume) == 2
    assert single_error(capsys.readouterr()) == f"no run 'nope' in journal {journal!r}"

    send = ["runs", "send", "nope", "Reply", "{}", "--journal", journal]
    assert main(send) == 2
    assert single_error(capsys.readouterr()) == f"no run 'nope' in journal {journal!r}"

    finished = ["runs", "resume", entry["run_id"], "--journal", journal]
    assert main([*finished, "--workflow", f"{FLOWS}:Greet"]) == 2
    assert single_error(capsys.readouterr()) == (
        f"run {entry['run_id']!r} already finished (completed); nothing to resume"
    )


def test_a_damaged_journal_is_one_line_with_status_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    journal = str(tmp_path / "runs.db")
    assert main(["run", f"{FLOWS}:Greet", "name=Ada", "--journal", journal, "-q"]) == 0
    assert main(["runs", "list", "--journal", journal, "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out.split("\n", 1)[1])  # after the result line
    run_id = entry["run_id"]
    # A record after the final snapshot whose bytes are not UTF-8, and the run marked as
    # unfinished, so that both ``runs show`` and ``runs resume`` read it.
    conn = sqlite3.connect(journal)
    with conn:
        (seq,) = conn.execute("SELECT seq FROM snapshots WHERE run_id = ?", (run_id,)).fetchone()
        conn.execute("INSERT INTO records VALUES (?, ?, x'ff00')", (run_id, seq))
        conn.execute("UPDATE runs SET status = 'running' WHERE run_id = ?", (run_id,))
    conn.close()
    damage = f"journal {journal!r}, run {run_id!r}: record seq {seq} is corrupt"
    assert main(["runs", "show", run_id, "--journal", journal]) == 2
    assert single_error(capsys.readouterr()).startswith(damage)
    resume = ["runs", "resume", run_id, "--journal", journal, "--workflow", f"{FLOWS}:Greet"]
    assert main(resume) == 2
    assert single_error(capsys.readouterr()).startswith(f"cannot resume run {run_id!r}: {damage}")

    # Garbage over the header: the file cannot be opened at all.
    with open(journal, "r+b") as file:
        file.write(b"\xde\xad\xbe\xef" * 64)
    not_a_database = f"journal {journal!r}: opening the journal failed: file is not a database"
    for arguments in (
        ["runs", "list", "--journal", journal],
        ["runs", "show", run_id, "--journal", journal],
        resume,
        ["run", f"{FLOWS}:Greet", "name=Ada", "--journal", journal],
    ):
        assert main(arguments) == 2
        assert single_error(capsys.readouterr()).startswith(not_a_database)


def test_resuming_with_another_workflow_or_an_instance_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = str(tmp_path / "runs.db")
    marker = str(tmp_path / "crashed")
    crashed = tickwork("run", f"{FLOWS}:Crashy", f"marker={marker}", "--journal", journal)
    assert crashed.returncode == 17, crashed.stderr
    (entry,) = json.loads(tickwork("runs", "list", "--journal", journal, "--json").stdout)
    monkeypatch.chdir(ROOT)
    resume = ["runs", "resume", entry["run_id"], "--journal", journal, "--workflow"]

    assert main([*resume, f"{FLOWS}:Greet"]) == 2
    assert single_error(capsys.readouterr()) == (
        f"run {entry['run_id']!r} belongs to workflow tests.cli_fixtures.flows.Crashy, "
        "not tests.cli_fixtures.flows.Greet"
    )
    assert main([*resume, f"{FLOWS}:shout_instance"]) == 2
    assert single_error(capsys.readouterr()) == (
        "runs resume needs a Workflow class, but tests.cli_fixtures.flows:shout_instance is "
        "an instance (the command creates it with this journal)"
    )
    # nothing was changed: the run can still be resumed with the right workflow
    listed = tickwork("runs", "list", "--journal", journal, "--json")
    assert json.loads(listed.stdout)[0]["status"] == "running"


@pytest.mark.parametrize(
    ("arguments", "stdin", "pattern"),
    [
        (
            (f"{FLOWS}:Boom",),
            "",
            r"run \w{10} failed in step explode: RuntimeError: kaboom",
        ),
        (
            (f"{FLOWS}:Greet",),  # no name=...: the step fails reading it
            "",
            r"run \w{10} failed in step hello: AttributeError: .*'name'",
        ),
        (
            (f"{FLOWS}:Sleepy", "--timeout", "0.2"),
            "",
            r"run \w{10} timed out: WorkflowTimeoutError: .*0\.2 seconds.*nap.*",
        ),
        (
            (f"{FLOWS}:Review", 'topics=["a"]'),
            "",
            r"run \w{10} needs an answer \(Approval\) but stdin gave none; "
            r"run abandoned \(it is not journaled\)",
        ),
    ],
    ids=["step-fails", "missing-start-field", "timeout", "no-answer"],
)
def test_run_failures_are_one_line_with_status_1(
    arguments: tuple[str, ...],
    stdin: str,
    pattern: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    assert main(["run", *arguments, "-q"]) == 1
    captured = capsys.readouterr()
    assert re.fullmatch(pattern, single_error(captured)), captured.err


def test_a_failing_run_exits_the_process_with_status_1() -> None:
    proc = tickwork("run", f"{FLOWS}:Boom", "-q")
    assert proc.returncode == 1
    assert re.fullmatch(
        r"run \w{10} failed in step explode: RuntimeError: kaboom", single_error(proc)
    )


def test_a_failing_run_ends_its_progress_with_the_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["run", f"{FLOWS}:Boom"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert "[explode:0] failed: RuntimeError: kaboom (no retry)" in lines
    assert re.fullmatch(
        r"tickwork: error: run \w{10} failed in step explode: RuntimeError: kaboom", lines[-1]
    )


def test_argparse_errors_exit_with_status_2() -> None:
    proc = tickwork("run", f"{FLOWS}:Greet", "--timeout", "soon")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (
        "tickwork run: error: argument --timeout: expected seconds or 'none', got 'soon'"
    )


# --- in-process helpers ------------------------------------------------------------------


def test_parse_assignments() -> None:
    assert parse_assignments(["a=1", "b=x", "c=[1]", "d=a=b"]) == {
        "a": 1,
        "b": "x",
        "c": [1],
        "d": "a=b",
    }
    with pytest.raises(CliError, match="'=3'") as caught:
        parse_assignments(["=3"])
    assert caught.value.status == 2


def test_main_imports_from_the_current_directory_when_it_is_not_on_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The installed ``tickwork`` script does not put the current directory on sys.path."""
    (tmp_path / "cwdflow.py").write_text(
        "from tickwork import StartEvent, StopEvent, Workflow, step\n\n\n"
        "class Hello(Workflow):\n"
        "    @step\n"
        "    async def hello(self, ev: StartEvent) -> StopEvent:\n"
        "        return StopEvent(result='hi')\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "cwdflow", raising=False)
    assert main(["run", "cwdflow:Hello", "-q"]) == 0
    assert capsys.readouterr().out == '"hi"\n'
    sys.modules.pop("cwdflow", None)
