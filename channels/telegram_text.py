"""What the Telegram bot says, and the small parsing it does: pure functions."""

from __future__ import annotations

from telegram import Message, MessageEntity

from gateway.errors import AgentGWError

REFUSAL = (
    "Hello! This is a private assistant and it only talks with the people its "
    "owner has allowed. Sorry — I won't answer here."
)
# What a person reads for an error code, before the code itself.
PROBLEMS = {
    "rate_limited": "You're sending messages faster than I can answer; give me a moment.",
    "shutting_down": "I'm restarting; please send that again in a moment.",
    "undecodable_audio": "I couldn't play that audio.",
    "audio_too_long": "That voice note is too long for me.",
    "audio_too_large": "That voice note is too large for me.",
    "silent_audio": "I couldn't hear any speech in that voice note.",
    "voice_unavailable": "I can't listen to voice notes right now; please type instead.",
    "store_error": "Something went wrong on my side while saving that.",
}


def problem_text(error: AgentGWError) -> str:
    return f"Sorry — {PROBLEMS.get(error.code, str(error))} ({error.code})"


class RateWindow:
    """At most ``limit`` events in any 60-second window."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._times: list[float] = []

    def allow(self, now: float) -> bool:
        self._times = [t for t in self._times if now - t < 60.0]
        if len(self._times) >= self.limit:
            return False
        self._times.append(now)
        return True


def parse_command(message: Message) -> tuple[str, str] | None:
    """``("link", "ABCD-EFGH")`` for "/link@the_bot ABCD-EFGH"; None for other messages."""
    text = message.text or ""
    entity = message.entities[0] if message.entities else None
    if entity is None or entity.type != MessageEntity.BOT_COMMAND or entity.offset != 0:
        return None
    # A command is ASCII, so Telegram's UTF-16 offsets equal Python's here.
    word = text[: entity.length]
    name = word[1:].partition("@")[0].lower()
    return name, text[entity.length :].strip()


HELP = (
    "What I can do:\n"
    "• Write to me, or send a voice note.\n"
    "/remember <something> — I'll keep it in mind.\n"
    "/forget <something> — I'll let it go.\n"
    "/link <code> — join this chat with the web chat (the code is shown there).\n"
    "/timezone <zone> — your time zone, like Europe/Lisbon, so I know your days.\n"
    "/persona — who I am.\n"
    "/help — this list."
)
LINK_HOWTO = (
    "To link this chat with the web chat, open the web chat, ask it for a link code, "
    "then send it here: /link ABCD-EFGH"
)


def persona_summary(persona: str, max_lines: int = 8, max_chars: int = 800) -> str:
    """The opening of the persona file as plain text: its title and first paragraphs."""
    lines: list[str] = []
    for raw in persona.strip().splitlines():
        line = raw.strip()
        if line.startswith("#"):
            if lines and raw.startswith("##"):
                break  # the first section after the opening ends the summary
            line = line.lstrip("#").strip()
        if line or (lines and lines[-1]):
            lines.append(line)
        if sum(1 for x in lines if x) >= max_lines:
            break
    summary = "\n".join(lines).strip()
    if len(summary) > max_chars:
        summary = summary[: max_chars - 1].rsplit(" ", 1)[0] + "…"
    return summary


def greeting(agent_name: str, first_name: str) -> str:
    return (
        f"Hi {first_name}! I'm {agent_name}. Write to me, or send a voice note "
        "and I'll answer in text and voice. I remember what you tell me, here and in "
        f"the browser once you link them.\n\n{HELP}"
    )


TIMEZONE_HOWTO = "Send its name, like this: /timezone Europe/Lisbon (or America/New_York)."


def timezone_text(name: str) -> str:
    return f"Your time zone here is {name}. To change it: /timezone Europe/Lisbon"


def usage(command: str) -> str:
    return f"Say what, like this: /{command} my sister is Ana"
