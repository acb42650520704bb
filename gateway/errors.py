"""The gateway's exception tree.

Every error that crosses a boundary of ours is one of these; adapters map
foreign errors (``anthropic.*``, ``openai.*``, ``httpx2.*``, SQLAlchemy, model libraries)
into them with ``raise ... from exc`` at the edge. Each carries a stable
``code`` that reaches the user in an ``error`` frame, never a stack trace.

    AgentGWError
    ├── ConfigError                  bad or missing configuration (names the key)
    ├── AccessDenied                 missing or wrong access token
    ├── InputError                   bad input from a client
    │   ├── MalformedFrame           not JSON, wrong shape, unknown type
    │   ├── FrameTooLarge            over the configured size limit
    │   ├── RateLimited              over the configured message rate
    │   └── AudioError               audio we cannot use
    │       ├── UndecodableAudio     not a format PyAV can decode
    │       ├── AudioTooLong         longer than voice.max_seconds
    │       ├── AudioTooLarge        bigger than voice.max_bytes
    │       └── SilentAudio          no speech found
    ├── VoiceUnavailable             a speech model is not installed or failed to load
    ├── PortUnavailable              the server's address cannot be bound (in use, not permitted)
    ├── StoreError                   the database failed
    │   ├── DataDirInUse             another agentgw holds the data directory
    │   └── DatabaseInUse            another agentgw holds the database
    └── BrainError                   a model call failed
        ├── BrainNotConfigured       no credentials / endpoint for that brain
        ├── BrainTimeout             no answer within the timeout
        ├── BrainRateLimited         429 after the retries
        ├── BrainOverloaded          529 / overloaded after the retries
        ├── BrainUnavailable         5xx or connection failure after the retries
        ├── BrainRejected            4xx: the request itself was refused
        ├── BrainInterrupted         the stream broke off mid-answer
        └── EmptyReply               the model answered with no text at all
"""

from __future__ import annotations


class AgentGWError(Exception):
    """Base of every error agentgw raises on purpose."""

    code = "internal_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)


class ConfigError(AgentGWError):
    code = "config_error"


class PortUnavailable(AgentGWError):
    code = "port_unavailable"


class AccessDenied(AgentGWError):
    code = "access_denied"


class InputError(AgentGWError):
    code = "bad_input"


class MalformedFrame(InputError):
    code = "malformed_frame"


class FrameTooLarge(InputError):
    code = "frame_too_large"


class RateLimited(InputError):
    code = "rate_limited"


class AudioError(InputError):
    code = "bad_audio"


class UndecodableAudio(AudioError):
    code = "undecodable_audio"


class AudioTooLong(AudioError):
    code = "audio_too_long"


class AudioTooLarge(AudioError):
    code = "audio_too_large"


class SilentAudio(AudioError):
    code = "silent_audio"


class VoiceUnavailable(AgentGWError):
    code = "voice_unavailable"


class StoreError(AgentGWError):
    code = "store_error"


class DataDirInUse(StoreError):
    code = "data_dir_in_use"


class DatabaseInUse(StoreError):
    code = "database_in_use"


class BrainError(AgentGWError):
    code = "brain_error"


class BrainNotConfigured(BrainError):
    code = "brain_not_configured"


class BrainTimeout(BrainError):
    code = "brain_timeout"


class BrainRateLimited(BrainError):
    code = "brain_rate_limited"


class BrainOverloaded(BrainError):
    code = "brain_overloaded"


class BrainUnavailable(BrainError):
    code = "brain_unavailable"


class BrainRejected(BrainError):
    code = "brain_rejected"


class BrainInterrupted(BrainError):
    code = "brain_interrupted"


class EmptyReply(BrainError):
    """The completion has no text (whitespace only): a failed turn, retryable, never shown."""

    code = "empty_reply"


def user_message(error: AgentGWError) -> str:
    """What the person reads: plain words and what happens to their message."""
    kept = "Your message is saved; you can send it again."
    texts = {
        "brain_timeout": "The model took too long to answer.",
        "brain_rate_limited": "The model is rate-limited right now.",
        "brain_overloaded": "The model is overloaded right now.",
        "brain_unavailable": "The model could not be reached.",
        "brain_interrupted": "The model's answer broke off.",
        "empty_reply": "The model answered with nothing.",
        "brain_rejected": "The model refused the request.",
        "brain_not_configured": "No model is configured.",
        "interrupted": "The gateway stopped before answering.",
        "store_error": "The database failed while answering.",
    }
    return f"{texts.get(error.code, 'Something went wrong while answering.')} {kept}"
