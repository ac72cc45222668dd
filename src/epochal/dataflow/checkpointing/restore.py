"""Matching a checkpoint's state to the operators of the job restoring it (Flink's rule).

Owns the check the driver runs before a restore is submitted: state of a uid that no operator
of the new job claims fails the restore with a :class:`PlanError` naming each piece, unless the
user allows non-restored state.
"""

from __future__ import annotations

from typing import Any

from epochal.errors import PlanError


def check_restore(metadata: dict[str, Any], location: str, operators: dict[str, dict[str, str]],
                  allow_non_restored_state: bool = False) -> list[dict[str, Any]]:
    """Match a checkpoint's state to the operators of the job restoring it, as Flink does.

    ``operators`` maps every uid of the new job to its ``{"name", "operation"}``. State of a uid no
    operator claims would be dropped without a word, so it fails the restore with a
    :class:`PlanError` naming every such piece of state, unless ``allow_non_restored_state``;
    returns what is skipped (uid, name, operation and what state it held).
    """
    state = metadata.get("operators", {})
    skipped = []
    for uid in sorted(state):
        if uid in operators:
            continue
        entry = state[uid]
        handles = list(entry.get("subtasks", {}).values())
        parts = [part for part in ("keyed", "operator") if any(part in h for h in handles)]
        skipped.append({"uid": uid, "name": entry.get("name"), "operation": entry.get("operation", entry.get("kind")),
                        "state": " and ".join(f"{p} state" for p in parts) or "state",
                        "subtasks": len(handles)})
    if not skipped or allow_non_restored_state:
        return skipped
    lines = []
    for item in skipped:
        owner = f"operator '{item['name']}' ({item['operation']})" if item["name"] else "an operator"
        line = f"  - uid '{item['uid']}': {item['state']} of {owner}, {item['subtasks']} subtask(s)"
        idle = [f"'{info['name']}' (uid '{uid}')" for uid, info in operators.items()
                if item["operation"] is not None and info.get("operation") == item["operation"] and uid not in state]
        if idle:
            line += (f"; this job's {item['operation']} operator(s) {', '.join(idle)} restore nothing: if one of "
                     f"them is the same operator, set .uid('{item['uid']}') on it")
        lines.append(line)
    count = f"{len(skipped)} operator{'s' if len(skipped) > 1 else ''}"
    raise PlanError(
        f"cannot restore checkpoint {location}: it holds state of {count} that no operator of this job claims "
        f"(uid{'s' if len(skipped) > 1 else ''} {', '.join(repr(i['uid']) for i in skipped)}); restoring would drop "
        "it without a word:\n" + "\n".join(lines) + "\n"
        "State is matched by operator uid: the one set with .uid(), else '<operation>:<name>' from the "
        "operator's .name(), else '<operation>-<n>' from its position among the job's operators of that operation. "
        "Give the operators that own this state their old uid with .uid(...), or pass "
        "allow_non_restored_state=True to execute() to start without it")
