"""``agentgw handoff read|write`` and ``agentgw profile show|rebuild``.

They go straight to the store, so they work while the gateway runs: its next turn
reads the note and the profile again. ``--person`` may be left out when the store
holds one person. ``gateway/cli.py`` calls ``add_commands``.
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
from memory.continuity.book import ContinuityBook
from memory.continuity.cli import person_command
from memory.continuity.handoff import HandoffBook, HandoffNote
from memory.continuity.profile import ProfileBook, ProfileInfo


def add_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    with_config: Callable[[argparse.ArgumentParser], None],
) -> None:
    handoff = sub.add_parser("handoff", help="the note the next session starts with")
    handoff_sub = handoff.add_subparsers(dest="handoff_command", required=True)
    profile = sub.add_parser("profile", help="the curated profile (what I know about you)")
    profile_sub = profile.add_subparsers(dest="profile_command", required=True)

    def command(
        parent: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str
    ) -> argparse.ArgumentParser:
        return person_command(parent, name, help_text, with_config, cmd_handoff)

    command(handoff_sub, "read", "the person's newest handoff note")
    command(
        handoff_sub, "write", "write a new note (the next session starts with it)"
    ).add_argument("text", help="the note (lines such as 'Open: ...', 'Next: ...')")
    command(profile_sub, "show", "the profile with each line's sources")
    command(profile_sub, "rebuild", "build the profile again from summaries and observations")


def note_json(note: HandoffNote | None, person_id: int) -> dict[str, Any]:
    if note is None:
        return {"person_id": person_id, "handoff": None}
    return {
        "person_id": person_id,
        "id": note.handoff_id,
        "handoff": note.text,
        "method": note.method,
        "conversation_id": note.conversation_id,
        "channel": note.channel,
        "tokens": note.tokens,
        "created_at": note.created_at.isoformat(),
    }


def note_lines(note: HandoffNote | None, person_id: int) -> list[str]:
    if note is None:
        return [f"person {person_id}: no handoff yet"]
    where = f" on {note.channel}" if note.channel else ""
    head = f"person {person_id}: handoff #{note.handoff_id}, {note.created_at:%Y-%m-%d %H:%M} UTC"
    return [f"{head}{where} ({note.method}, {note.tokens} tokens)", note.text]


def profile_json(profile: ProfileInfo | None, person_id: int) -> dict[str, Any]:
    if profile is None:
        return {"person_id": person_id, "profile": None}
    return {
        "person_id": person_id,
        "id": profile.profile_id,
        "tokens": profile.tokens,
        "method": profile.method,
        "created_at": profile.created_at.isoformat(),
        "lines": [{"text": line.text, "sources": list(line.sources)} for line in profile.lines],
    }


def profile_lines(profile: ProfileInfo | None, person_id: int) -> list[str]:
    if profile is None or not profile.lines:
        return [f"person {person_id}: no profile yet (the weekly job builds it)"]
    return [
        f"person {person_id}: {profile.tokens} tokens, {profile.created_at:%Y-%m-%d}",
        *(f"- {line.text}  [{', '.join(line.sources)}]" for line in profile.lines),
    ]


def cmd_handoff(args: argparse.Namespace) -> int:
    path: Path | None = getattr(args, "config", None)
    config = load_config(path)
    data, lines = asyncio.run(_run(config, args))
    sys.stdout.write((json.dumps(data, indent=2) if args.json else "\n".join(lines)) + "\n")
    return 0


async def _run(config: Config, args: argparse.Namespace) -> tuple[Any, list[str]]:
    from gateway.store import Store

    async with Store(config.database_url, echo=config.store.echo) as store:
        person = await ContinuityBook(store, config.continuity).person(args.person)
        if getattr(args, "handoff_command", None) is not None:
            handoffs = HandoffBook(store, config.continuity)
            if args.handoff_command == "write":
                await handoffs.write(person, args.text, method="cli")
            note = await handoffs.latest(person)
            return note_json(note, person), note_lines(note, person)
        profiles = ProfileBook(store, config.continuity)
        if args.profile_command == "rebuild":
            await profiles.rebuild(person)
        profile = await profiles.latest(person)
        return profile_json(profile, person), profile_lines(profile, person)
