"""The ``tickwork`` command finishes what it starts: runs that wait for a human, crash or
are interrupted are shown, answered, resumed and sent events from the command line.

Each scenario runs the command as a process (``python -m tickwork.cli``) with the
workflows of ``tests/cli_fixtures/flows.py``; a run is left waiting by giving
``tickwork run --journal`` no answer on stdin (it exits, the run stays in its journal).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tests.cli_fixtures.commands import (
    COMMAND_DEADLINE_SECONDS,
    FLOWS,
    ROOT,
    command_env,
    last_error,
    single_error,
    tickwork,
)
from tests.cli_fixtures.flows import Approval

from tickwork._cli.console import Console
from tickwork._cli.questions import Question, read_answer
from tickwork.cli import main


def left_waiting(journal: str, *arguments: str) -> str:
    """Start ``tickwork run ARGUMENTS --journal JOURNAL`` with no answer on stdin; the id
    of the run it leaves waiting in the journal."""
    proc = tickwork("run", *arguments, "--journal", journal)
    assert proc.returncode == 1, proc.stderr
    found = re.search(r"\[run\] (\w{10}) started", proc.stderr)
    assert found is not None, proc.stderr
    run_id = found[1]
    assert last_error(proc).startswith(f"run {run_id} needs an answer")
    assert f"the run waits in its journal: tickwork runs resume {run_id} --journal {journal}" in (
        proc.stderr
    )
    return run_id


def show(run_id: str, journal: str) -> dict[str, object]:
    """``tickwork runs show RUN --json``, in this process (the same code, no start-up)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["runs", "show", run_id, "--journal", journal, "--json"]) == 0
    summary: dict[str, object] = json.loads(out.getvalue())
    return summary


# --- the return pattern -------------------------------------------------------------------


def test_a_returned_question_is_shown_and_answered_on_resume_keeping_no_timeout(
    tmp_path: Path,
) -> None:
    journal = str(tmp_path / "runs.db")
    run_id = left_waiting(journal, f"{FLOWS}:Review", 'topics=["a", "b"]', "--timeout", "none")

    text = tickwork("runs", "show", run_id, "--journal", journal)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert "status:        parked" in lines
    assert "timeout:       none" in lines
    assert "activity:      waiting for input" in lines
    assert re.fullmatch(
        r"alive time:    \d+\.\d{3}s \(no timeout\)", lines[lines.index("timeout:       none") + 2]
    )
    assert (
        "questions:     AskApproval(text='all about a\\nall about b') (answer with Approval)"
        in lines
    )
    assert "running:       none" in lines and "queued:        none" in lines
    summary = show(run_id, journal)
    assert summary["options"] == {"timeout": None}
    current = summary["current"]
    assert isinstance(current, dict)
    assert current["questions"] == [
        {"question": "AskApproval(text='all about a\\nall about b')", "answer_with": ["Approval"]}
    ]

    # A bad answer: one line, status 2, and the run is left as it was.
    bad = tickwork("runs", "resume", run_id, "--journal", journal, stdin='{"approved": "maybe"}\n')
    assert bad.returncode == 2
    assert last_error(bad).startswith(
        "invalid answer: Approval: approved: Input should be a valid boolean"
    )
    assert show(run_id, journal)["status"] == "parked"

    resumed = tickwork("runs", "resume", run_id, "--journal", journal, stdin="true\n")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) is True
    assert f"[run] {run_id} waits for input (1 question)" in resumed.stderr
    assert "[decide:0] done -> StopEvent" in resumed.stderr
    after = show(run_id, journal)
    assert (after["status"], after["options"]) == ("completed", {"timeout": None})


def test_a_question_with_several_response_types_is_answered_by_type_name() -> None:
    voted = tickwork("run", f"{FLOWS}:Vote", "motion=tea", "-q", stdin='No {"reason": "late"}\n')
    assert voted.returncode == 0, voted.stderr
    assert json.loads(voted.stdout) == "rejected: late"
    bare = tickwork("run", f"{FLOWS}:Vote", "motion=tea", "-q", stdin="Yes\n")
    assert json.loads(bare.stdout) == "carried"

    unnamed = tickwork("run", f"{FLOWS}:Vote", "motion=tea", stdin='{"reason": "late"}\n')
    assert unnamed.returncode == 2
    assert (
        "[input] reading the answer with a type's name, then JSON: Yes (no fields), "
        "No (reason) from stdin" in unnamed.stderr
    )
    assert last_error(unnamed) == (
        "invalid answer: start the answer with the type's name: Yes or No; run abandoned "
        "(it is not journaled)"
    )


def test_a_bad_answer_at_an_interactive_prompt_is_asked_again() -> None:
    stderr = io.StringIO()
    question = Question(key="q", asked=None, response_types=(Approval,), step="decide")
    answers = iter(['{"approved": "maybe"}\n', "not json\n", '{"approved": true}\n'])
    answer = read_answer(question, Console(stderr), lambda: next(answers), interactive=True)
    assert answer == Approval(approved=True)
    shown = stderr.getvalue()
    assert shown.count("answer with Approval as JSON (approved): ") == 3
    assert "[input] invalid answer: Approval: approved: Input should be a valid boolean" in shown
    assert "[input] invalid answer: not JSON: " in shown


# --- the wait pattern ---------------------------------------------------------------------


def test_a_waiting_step_is_answered_by_runs_send_and_keeps_no_timeout(tmp_path: Path) -> None:
    journal = str(tmp_path / "runs.db")
    # Interview's own default timeout is 0.5 s; the run lingers 1 s after the answer.
    run_id = left_waiting(
        journal, f"{FLOWS}:Interview", "topic=tea", "linger=1", "--timeout", "none"
    )
    text = tickwork("runs", "show", run_id, "--journal", journal).stdout.splitlines()
    waiting = next(line for line in text if line.startswith("waiting:"))
    assert re.fullmatch(
        r"waiting:       ask waits for Reply \(topic='tea'\), "
        r"deadline \S+ \S+ \(in (59min|60min)\)",
        waiting,
    ), waiting
    assert (
        text[text.index(waiting) + 1] == "                 asked: Question(text='what about tea?')"
    )

    wrong_topic = tickwork(
        "runs", "send", run_id, "Reply", '{"topic": "coffee", "text": "no"}', "--journal", journal
    )
    assert wrong_topic.returncode == 2
    assert single_error(wrong_topic) == (
        "invalid Reply: topic must be 'tea': step ask waits for Reply (topic='tea')"
    )
    unknown = tickwork("runs", "send", run_id, "Rply", "{}", "--journal", journal)
    assert unknown.returncode == 2
    assert single_error(unknown).startswith(
        "workflow tests.cli_fixtures.flows.Interview has no event type 'Rply' (its events: "
    )

    sent = tickwork("runs", "send", run_id, "Reply", '{"text": "fine"}', "--journal", journal)
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout) == "tea: fine"
    assert "[send] Reply(topic='tea', text='fine') is journaled" in sent.stderr
    assert show(run_id, journal)["status"] == "completed"


def test_a_waiting_step_is_answered_on_resume_and_keeps_its_timeout(tmp_path: Path) -> None:
    journal = str(tmp_path / "runs.db")
    run_id = left_waiting(journal, f"{FLOWS}:Interview", "topic=tea", "linger=1", "--timeout", "30")
    resumed = tickwork(
        "runs", "resume", run_id, "--journal", journal, "--backend", "trio", stdin='"good"\n'
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == "tea: good"
    assert "[input] Question(text='what about tea?')" in resumed.stderr
    assert "pre-filled: topic='tea'" in resumed.stderr
    assert show(run_id, journal)["options"] == {"timeout": 30.0}


def test_runs_send_stops_when_the_run_waits_again_and_leaves_it_resumable(
    tmp_path: Path,
) -> None:
    journal = str(tmp_path / "runs.db")
    run_id = left_waiting(journal, f"{FLOWS}:Interview", "topic=tea", "rounds=2")
    sent = tickwork("runs", "send", run_id, "Reply", '{"text": "green"}', "--journal", journal)
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout == ""  # not finished: no result
    lines = sent.stderr.splitlines()
    assert "[input] Question(text='more?') (answer with Reply)" in lines
    assert lines[-1] == (
        f"[run] {run_id} waits for input; it stays resumable: tickwork runs send {run_id} "
        f"Reply JSON --journal {journal} --workflow {FLOWS}:Interview"
    )
    assert show(run_id, journal)["status"] == "parked"
    resumed = tickwork("runs", "resume", run_id, "--journal", journal, stdin='"black"\n')
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == "tea: green, black"


# --- runs show: failures, errors ------------------------------------------------------------


def test_runs_show_says_why_a_run_failed(tmp_path: Path) -> None:
    journal = str(tmp_path / "runs.db")
    failed = tickwork("run", f"{FLOWS}:Boom", "--journal", journal, "-q")
    assert failed.returncode == 1
    (entry,) = json.loads(tickwork("runs", "list", "--journal", journal, "--json").stdout)
    text = tickwork("runs", "show", entry["run_id"], "--journal", journal)
    assert "status:        failed" in text.stdout
    assert "error:         step explode: RuntimeError: kaboom" in text.stdout
    assert show(entry["run_id"], journal)["error"] == "step explode: RuntimeError: kaboom"


# --- scripts ------------------------------------------------------------------------------

SCRIPT = """\
    import sys

    import anyio

    from tickwork import HumanResponseEvent, InputRequiredEvent, StartEvent, StopEvent
    from tickwork import Workflow, step
    from tickwork.journal import SqliteJournal, recover_runs


    class Ask(InputRequiredEvent):
        question: str


    class Answer(HumanResponseEvent):
        approved: bool


    class Sign(Workflow):
        @step
        async def ask(self, ev: StartEvent) -> Ask:
            return Ask(question=f"sign {ev.paper}?")

        @step
        async def decide(self, ev: Answer) -> StopEvent:
            return StopEvent(result=ev.approved)


    async def main() -> None:
        handler = Sign(journal=SqliteJournal(sys.argv[1]), timeout=None).run(paper="lease")
        async for event in handler.stream_events():
            if isinstance(event, Ask):
                print(handler.run_id, Sign().workflow_name)
                return  # the run waits in the journal


    async def recover() -> None:
        # The journal names this script's classes signing.*: here they are __main__'s.
        handlers = await recover_runs(Sign(journal=SqliteJournal(sys.argv[1])))
        for run_id, handler in handlers.items():
            await handler.send_event(Answer(approved=False))
            print(run_id, await handler)


    if __name__ == "__main__":
        anyio.run(recover if sys.argv[2:] == ["recover"] else main)
"""


def _start_script(tmp_path: Path, *command: str, stdin: str | None = None) -> tuple[str, str]:
    """Run a script that leaves a run waiting; its run id and workflow name."""
    proc = subprocess.run(
        command, input=stdin, capture_output=True, text=True, cwd=tmp_path, env=command_env(),
        timeout=COMMAND_DEADLINE_SECONDS, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    run_id, name = proc.stdout.split()
    return run_id, name


def test_runs_started_by_a_script_are_recorded_under_its_module_and_resumed(
    tmp_path: Path,
) -> None:
    (tmp_path / "signing.py").write_text(textwrap.dedent(SCRIPT), encoding="utf-8")
    journal = str(tmp_path / "runs.db")
    run_id, name = _start_script(tmp_path, sys.executable, "signing.py", journal)
    assert name == "signing.Sign"  # not __main__.Sign
    shown = tickwork("runs", "show", run_id, "--journal", journal, cwd=tmp_path)
    assert "questions:     Ask(question='sign lease?') (answer with Answer)" in shown.stdout
    resumed = tickwork("runs", "resume", run_id, "--journal", journal, cwd=tmp_path, stdin="true\n")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) is True
    # The script itself resumes its runs too (its classes are found under the same name).
    second, _ = _start_script(tmp_path, sys.executable, "signing.py", journal)
    recovered, result = _start_script(tmp_path, sys.executable, "signing.py", journal, "recover")
    assert (recovered, result) == (second, "False")


def test_a_main_module_name_may_be_overridden_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / "signing.py").write_text(textwrap.dedent(SCRIPT), encoding="utf-8")
    journal = str(tmp_path / "runs.db")
    # Read from stdin, the script has no file: its classes stay __main__.*
    script = textwrap.dedent(SCRIPT)
    run_id, name = _start_script(tmp_path, sys.executable, "-", journal, stdin=script)
    assert name == "__main__.Sign"
    refused = tickwork("runs", "resume", run_id, "--journal", journal, cwd=tmp_path)
    assert refused.returncode == 2
    assert single_error(refused) == (
        f"run {run_id!r} was started by a script as __main__.Sign, which no other process can "
        "import; name its workflow with --workflow MODULE:Sign"
    )
    resumed = tickwork(
        "runs", "resume", run_id, "--journal", journal, "--workflow", "signing:Sign",
        cwd=tmp_path, stdin='{"approved": false}\n',
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) is False
    assert resumed.stderr.startswith(
        f"tickwork: warning: run {run_id!r} was recorded by a script as __main__.Sign; it is "
        "taken as signing.Sign"
    )


def test_a_workflow_that_does_not_import_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "signing.py").write_text(textwrap.dedent(SCRIPT), encoding="utf-8")
    journal = str(tmp_path / "runs.db")
    run_id, _ = _start_script(tmp_path, sys.executable, "signing.py", journal)
    elsewhere = tmp_path.parent  # where signing.py does not import
    # show falls back to the latest snapshot, and says why
    shown = tickwork("runs", "show", run_id, "--journal", journal, cwd=elsewhere)
    assert shown.returncode == 0, shown.stderr
    assert (
        f"current state: unknown (cannot import the workflow signing.Sign of run {run_id!r}; "
        "name it with --workflow MODULE:WORKFLOW)" in shown.stdout.splitlines()
    )
    assert "snapshot:      before record 0 (format 3)" in shown.stdout
    for command in (["resume", run_id], ["send", run_id, "Answer", "true"]):
        refused = tickwork("runs", *command, "--journal", journal, cwd=elsewhere)
        assert refused.returncode == 2
        assert single_error(refused) == (
            f"cannot import the workflow signing.Sign of run {run_id!r}; name it with "
            "--workflow MODULE:WORKFLOW"
        )
    named = tickwork("runs", "show", run_id, "--journal", journal, "--workflow", "nope:Sign")
    assert named.returncode == 2
    assert single_error(named) == "cannot import module 'nope': no module named 'nope'"


# --- Ctrl-C and --version -----------------------------------------------------------------


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
def test_ctrl_c_says_how_to_resume_the_run(tmp_path: Path) -> None:
    journal = str(tmp_path / "runs.db")
    command = [sys.executable, "-m", "tickwork.cli", "run", f"{FLOWS}:Review", 'topics=["a"]']
    with subprocess.Popen(
        [*command, "--journal", journal],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=ROOT, env=command_env(),
        # Ctrl-C as at a terminal, even when this test runs in a background job (which
        # would pass SIGINT on ignored: the command rightly keeps a disposition it gets).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    ) as proc:  # fmt: skip
        assert proc.stderr is not None
        seen = ""
        deadline = time.monotonic() + COMMAND_DEADLINE_SECONDS
        while "[input] reading" not in seen and time.monotonic() < deadline:
            seen += proc.stderr.readline()
        proc.send_signal(signal.SIGINT)
        # stdin stays open, as at a terminal where someone presses Ctrl-C: the command
        # must end without its pending read of an answer finishing (closing stdin here
        # would also race the interrupt with an end of input).
        proc.wait(timeout=COMMAND_DEADLINE_SECONDS)
        rest = proc.stderr.read()
    assert proc.returncode == 130
    run_id = re.search(r"\[run\] (\w{10}) started", seen)
    assert run_id is not None
    assert rest.splitlines()[-1] == (
        f"tickwork: error: interrupted; run {run_id[1]} is kept; resume it with tickwork runs "
        f"resume {run_id[1]} --journal {journal} --workflow {FLOWS}:Review"
    )
    assert show(run_id[1], journal)["status"] == "parked"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert re.fullmatch(r"tickwork \d+\.\d+\.\d+\S*\n", capsys.readouterr().out)


# --- progress -----------------------------------------------------------------------------


def test_progress_shows_retried_failures_and_cancelled_steps() -> None:
    flaky = tickwork("run", f"{FLOWS}:Flaky")
    assert flaky.returncode == 0, flaky.stderr
    lines = flaky.stderr.splitlines()
    assert lines[1:6] == [
        "[fetch:0] running (StartEvent)",
        "[fetch:0] failed: ConnectionError: attempt 1 failed (retry in 0.01s)",
        "[fetch:0] running (StartEvent)",
        "[fetch:0] failed: ConnectionError: attempt 2 failed (retry in 0.01s)",
        "[fetch:0] running (StartEvent)",
    ]
    timed_out = tickwork("run", f"{FLOWS}:Sleepy", "--timeout", "0.2")
    assert timed_out.returncode == 1
    assert timed_out.stderr.splitlines()[-2] == "[nap:0] cancelled"
