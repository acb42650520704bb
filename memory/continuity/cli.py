"""``agentgw working-memory show|set|update|clear`` and ``agentgw decision log|list``.

They go straight to the store, so they work while the gateway runs: its next turn
reads the focus and the decisions again. ``--person`` may be left out when the
store holds one person. ``gateway/cli.py`` calls ``add_commands``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.config import Config, load_config
from gateway.errors import InputError
from memory.continuity.book import ContinuityBook, DecisionInfo, FocusNote, FocusState
from memory.continuity.models import Origin


def person_command(
    parent: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help_text: str,
    with_config: Callable[[argparse.ArgumentParser], None],
    func: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    """A subcommand about one person: ``--json`` and ``--person`` (optional with one)."""
    parser = parent.add_parser(name, help=help_text)
    with_config(parser)
    parser.add_argument(
        "--json", action="store_true", help="print JSON instead of text (default: text)"
    )
    parser.add_argument(
        "--person",
        type=int,
        default=None,
        help="the person's id (default: the only person in the store)",
    )
    parser.set_defaults(func=func)
    return parser


def add_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    with_config: Callable[[argparse.ArgumentParser], None],
) -> None:
    focus = sub.add_parser("working-memory", help="the person's current focus")
    focus_sub = focus.add_subparsers(dest="focus_command", required=True)
    decision = sub.add_parser("decision", help="the person's decision log (append-only)")
    decision_sub = decision.add_subparsers(dest="decision_command", required=True)

    def command(
        parent: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str
    ) -> argparse.ArgumentParser:
        return person_command(parent, name, help_text, with_config, cmd_continuity)

    command(focus_sub, "show", "the focus, its updates, and whether it faded")
    command(focus_sub, "set", "set a new focus").add_argument("text", help="the focus")
    command(focus_sub, "update", "add a dated update to the focus (and touch it)").add_argument(
        "text", help="the update"
    )
    command(focus_sub, "clear", "end the focus")
    log = command(decision_sub, "log", "log a decision")
    log.add_argument("text", help="what was decided")
    log.add_argument(
        "--tag", action="append", default=[], help="a tag (repeat for more; default: none)"
    )
    log.add_argument(
        "--reverses",
        type=int,
        default=None,
        help="the id of the decision this one reverses (default: none)",
    )
    listed = command(decision_sub, "list", "list decisions, oldest first")
    listed.add_argument(
        "--last", type=int, default=None, help="only the newest N (default: all of them)"
    )


def note_json(note: FocusNote) -> dict[str, Any]:
    return {
        "id": note.entry_id,
        "action": note.action.value,
        "text": note.text,
        "origin": note.origin.value,
        "source_message_id": note.source_message_id,
        "created_at": note.created_at.isoformat(),
    }


def state_json(state: FocusState | None, person_id: int) -> dict[str, Any]:
    if state is None:
        return {"person_id": person_id, "focus": None}
    return {
        "person_id": person_id,
        "focus": state.focus.text,
        "set_at": state.focus.created_at.isoformat(),
        "touched_at": state.touched_at.isoformat(),
        "age_days": state.age_days,
        "idle_days": state.idle_days,
        "faded": state.faded,
        "updates": [note_json(n) for n in state.updates],
    }


def state_lines(state: FocusState | None, person_id: int, fade_days: float) -> list[str]:
    if state is None:
        return [f"person {person_id}: no focus"]
    head = f"person {person_id}: {state.focus.text}"
    when = f"set {state.focus.created_at:%Y-%m-%d %H:%M} UTC ({state.age_days} days ago)"
    if state.faded:
        when += (
            f"; faded: not touched for {state.idle_days} days (fades after {fade_days:g}),"
            " out of the prompt"
        )
    else:
        when += f"; last touched {state.idle_days} days ago"
    return [head, f"  {when}", *(f"  - {n.created_at:%Y-%m-%d}: {n.text}" for n in state.updates)]


def decision_json(d: DecisionInfo) -> dict[str, Any]:
    return {
        "id": d.decision_id,
        "person_id": d.person_id,
        "text": d.text,
        "tags": list(d.tags),
        "origin": d.origin.value,
        "reverses": d.reverses_id,
        "reversed_by": d.reversed_by,
        "source_message_id": d.source_message_id,
        "created_at": d.created_at.isoformat(),
    }


def decision_line(d: DecisionInfo) -> str:
    line = f"#{d.decision_id:<4} {d.created_at:%Y-%m-%d} {d.text}"
    if d.tags:
        line += f" [{', '.join(d.tags)}]"
    if d.reverses_id is not None:
        line += f" (reverses #{d.reverses_id})"
    if d.reversed_by is not None:
        line += f" (reversed by #{d.reversed_by})"
    return line


def cmd_continuity(args: argparse.Namespace) -> int:
    path: Path | None = getattr(args, "config", None)
    config = load_config(path)
    data, lines = asyncio.run(_run(config, args))
    text = json.dumps(data, indent=2) if args.json else "\n".join(lines)
    sys.stdout.write(text + "\n")
    return 0


async def _run(config: Config, args: argparse.Namespace) -> tuple[Any, list[str]]:
    from gateway.store import Store

    async with Store(config.database_url, echo=config.store.echo) as store:
        book = ContinuityBook(store, config.continuity)
        fade = config.continuity.focus_fade_days
        if getattr(args, "decision_command", None) == "log":
            logged = await book.log_decision(
                args.person,
                args.text,
                tags=args.tag,
                origin=Origin.CLI,
                reverses_id=args.reverses,
            )
            return decision_json(logged), [f"logged {decision_line(logged)}"]
        person = await book.person(args.person)
        if getattr(args, "decision_command", None) == "list":
            if args.last is not None and args.last < 1:
                raise InputError("--last must be 1 or more")
            found = await book.decisions(person, last=args.last)
            return [decision_json(d) for d in found], [decision_line(d) for d in found] or [
                f"person {person}: no decisions"
            ]
        command = args.focus_command
        if command == "show":
            state = await book.focus(person)
            return state_json(state, person), state_lines(state, person, fade)
        if command == "clear":
            ended = await book.clear_focus(person, origin=Origin.CLI)
            line = f"cleared: {ended.text}" if ended else f"person {person}: no focus to clear"
            return {"person_id": person, "cleared": ended.text if ended else None}, [line]
        if command == "set":
            state = await book.set_focus(person, args.text, origin=Origin.CLI)
        else:
            state = await book.update_focus(person, args.text, origin=Origin.CLI)
        return state_json(state, person), state_lines(state, person, fade)
