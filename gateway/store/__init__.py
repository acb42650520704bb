"""The durable store: SQLAlchemy 2.0 async models, sessions and migrations."""

from gateway.store.db import Store
from gateway.store.models import (
    Base,
    Conversation,
    Identity,
    Message,
    MessageRole,
    Person,
    Turn,
    TurnStatus,
)

__all__ = [
    "Base",
    "Conversation",
    "Identity",
    "Message",
    "MessageRole",
    "Person",
    "Store",
    "Turn",
    "TurnStatus",
]
