"""The loop every engine driver runs, in the engine's own venv (standard library only).

One JSON request a line on stdin, `{"op": name, "args": {...}}`; one JSON answer a line,
`{"ok": true, "result": ...}` or `{"ok": false, "type": ..., "error": ..., "trace": ...}`,
on the process's original stdout. Everything else the engine prints (Ray's progress lines,
Rust logs) is sent to stderr, so it never breaks a line of the protocol: fd 1 is pointed at
stderr before the engine is imported, and answers go to a private copy of the old fd 1
(non-inheritable, so worker processes cannot write to it either)."""

import json
import os
import sys
import traceback


def take_stdout():
    """Keeps fd 1 for the answers and points fd 1 (and sys.stdout) at stderr. Call it before
    the engine is imported."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return answers


def serve(answers, ops: dict) -> None:
    """Answers requests until stdin closes."""
    answers.write(json.dumps({"ok": True, "result": "ready"}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            result = ops[request["op"]](**request.get("args", {}))
            answer = {"ok": True, "result": result}
        except Exception as e:  # the engine's error is the answer
            answer = {"ok": False, "type": type(e).__name__, "error": str(e), "trace": traceback.format_exc()}
        answers.write(json.dumps(answer, default=str) + "\n")
