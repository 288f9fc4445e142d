"""`--json`: a task's result as one JSON document on stdout, for scripts and CI.

Each document names its schema (`"schema": "vllm-fork/<name>/<version>"`), a JSON
Schema in `vllm_fork/cli/schemas/<name>.schema.json` (docs/json.md describes them).
Messages for people stay on stderr; an error prints its message there, exits non-zero
and writes no document. Fields are only ever added within a schema version, so
a reader ignores the fields it does not know.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_fork.queue.report import stale_exceptions

if TYPE_CHECKING:
    from vllm_fork.queue.check import Review
    from vllm_fork.queue.status import Status
    from vllm_fork.rebase.survey import Survey
    from vllm_fork.wheel.verify import Report

SCHEMAS = Path(__file__).resolve().parent / "schemas"
#: Raised when a field is removed or changes meaning (added fields keep the version).
VERSION = 1


def schema_id(name: str) -> str:
    return f"vllm-fork/{name}/{VERSION}"


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema of a task's document."""
    loaded: dict[str, Any] = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    return loaded


def plain(value: Any) -> Any:
    """Dataclasses, paths, tuples and sets as JSON values (a dataclass's properties are not fields)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted(plain(v) for v in value)
    if isinstance(value, Path):
        return str(value)
    return value


def document(name: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"schema": schema_id(name), **plain(data)}


def emit(name: str, data: dict[str, Any]) -> None:
    """Print the task's document on stdout."""
    print(json.dumps(document(name, data), indent=2))


# -- the documents: what each task's lower layer returned, as its schema says --


def status_document(found: Status) -> dict[str, Any]:
    state = found.state
    tree_fields: dict[str, Any] = {
        "head": (state.head or "?") if state else "",
        "stopped": (state.stopped or "") if state else "",
        "rebase_stopped": state.fork_rebase if state else False,
        "dirty": state.dirty if state else [],
        "unexported": state.unexported if state else [],
        "missing": state.missing if state else [],
    }
    fields = {k: v for k, v in plain(found).items() if k != "state"}
    return {**fields, "made": found.made, **tree_fields}


def verify_document(wheel: str, report: Report) -> dict[str, Any]:
    return {"wheel": wheel, "ok": not report.problems, **plain(report)}


def check_document(result: Review) -> dict[str, Any]:
    return {
        "ok": not result.problems,
        "problems": [{"kind": p.kind.value, "patch": p.patch, "message": p.message} for p in result.problems],
        "policy": {**plain(result.policy), "describe": result.policy.describe()},
        "patches": [
            {
                **plain(r),
                "untested": r.untested,
                "excused": [{"breach": plain(b), "reason": why} for b, why in r.excused],
            }
            for r in result.reports
        ],
        "stale_exceptions": stale_exceptions(result.reports, result.policy),
    }


def survey_document(result: Survey, report: Path) -> dict[str, Any]:
    return {"report": report, "failing": [f.name for f in result.failing()], **result.to_dict()}
