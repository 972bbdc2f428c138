"""`hearth chat --mcp FILE --tool-choice required` with the starter model and a real MCP server: the
call reaches the server, its card is printed (tool, arguments, result, duration), then an answer."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.engine.agent.conftest import SERVER


def test_chat_with_mcp_prints_the_card_and_an_answer(tmp_path, call_log):
    mcp = tmp_path / "mcp.json"
    mcp.write_text(json.dumps({"mcpServers": {
        "rec": {"command": sys.executable, "args": [str(SERVER), "stdio"],
                "env": {"HEARTH_TEST_MCP_LOG": str(call_log.path)}, "disabledTools": ["wait", "slow_lookup", "crash"]},
        "broken": {"command": sys.executable, "args": [str(SERVER), "stdio"], "env": {"HEARTH_TEST_MCP_FAIL": "1"}},
    }}))  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "chat", "--mcp", str(mcp), "--tool-choice", "required",
         "--allow-tools", "--temperature", "0", "--max-tokens", "40", "--max-rounds", "1",
         "What does the word cat mean? Look it up."],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "┌ tool lookup on rec · done · " in out and " ms" in out.splitlines()[0]
    assert "│ arguments: {" in out and "│ result: '" in out and "small domestic animal" in out
    calls = call_log.calls()
    assert [c["tool"] for c in calls] == ["lookup"]
    assert calls[0]["args"]["word"] in out  # the card shows the arguments the server got
    answer = out.split("└\n", 1)[1]
    assert answer.strip()  # the model answered after the card
    # the server that could not start is said with its stderr, and the chat went on
    assert "MCP server broken is not running" in proc.stderr and "the database is missing" in proc.stderr
    assert "round limit" in proc.stderr  # --max-rounds 1: said, not silent


def test_bad_mcp_file_is_one_sentence(tmp_path):
    bad = tmp_path / "mcp.json"
    bad.write_text("{nope")
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "chat", "--mcp", str(bad), "hi"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith("hearth: The MCP file is not valid JSON") and "Traceback" not in proc.stderr


def test_an_mcp_conversation_longer_than_the_context_leaves_out_its_oldest_turns_and_goes_on(tmp_path):
    """As `hearth chat`'s: past the context, the oldest exchanges are left out (said once, dimmed) instead of every
    later turn failing; a message too long alone is said and taken back; the next one is answered."""
    from tests.engine.test_cli import OVERFLOWING, assert_the_overflow_was_handled, converse_at_a_terminal

    mcp = tmp_path / "mcp.json"  # a server that does not start: no tools, the agent loop answers as a chat
    mcp.write_text(json.dumps({"mcpServers": {"broken": {"command": sys.executable, "args": [str(SERVER), "stdio"],
                                                         "env": {"HEARTH_TEST_MCP_FAIL": "1"}}}}))  # fmt: skip
    argv = ["chat", "--mcp", str(mcp), "--ctx", "512", "--temperature", "0", "--max-tokens", "4"]
    code, turns = converse_at_a_terminal(argv, OVERFLOWING, first_timeout=300)
    assert code == 0, turns
    assert_the_overflow_was_handled(turns)
