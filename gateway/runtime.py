"""The running gateway: its parts, reachable from request handlers through ``GATEWAY``.

Built by the composition root (gateway/app.py) and read by the routes that need
the running parts (the panel, ``/metrics``, ``/readyz``). Its own module so that
those routes do not import the composition root, which imports them. It names
parts of every layer, so it sits with the edge (channels, voice, web) and not
in the kernel (docs/DESIGN.md, "Layers and the app's lifecycle").
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from channels.webchat import WebchatChannel
from gateway.brains.base import Brain
from gateway.cluster import ClusterNode
from gateway.config import Config
from gateway.hub import ConversationHub
from gateway.linking import LinkCodes
from gateway.pipeline import TurnPipeline
from gateway.router import Router
from gateway.sessions import Sessions
from gateway.store import Store
from gateway.supervisor import TaskSupervisor
from gateway.zones import PersonZones
from memory.jobs.calendar import UpkeepCalendar
from memory.service import MemoryService
from persona.loop import PersonaLoop
from voice.service import VoiceService

if TYPE_CHECKING:
    from channels.telegram import TelegramChannel


@dataclass
class Gateway:
    """The running parts, reachable from handlers through ``GATEWAY``."""

    config: Config
    store: Store
    brain: Brain
    hub: ConversationHub
    supervisor: TaskSupervisor
    router: Router
    webchat: WebchatChannel
    # Built once the models loaded (see ``create_app``); until then turns wait, stored.
    pipeline: TurnPipeline | None = None
    # None when voice.enabled is false; models load on first use or with voice.preload.
    voice: VoiceService | None = None
    links: LinkCodes | None = None
    # None unless telegram.enabled.
    telegram: TelegramChannel | None = None
    # PersonaState versions, observations, SyncScores and anchors (issue 4).
    persona: PersonaLoop | None = None
    # Memory items, the Memory Pack and its traces (issue 3); None when memory.enabled is false.
    memory: MemoryService | None = None
    # Each person's time zone (gateway/zones.py).
    zones: PersonZones | None = None
    # The upkeep calendar (memory/jobs/calendar.py); None when memory.enabled is false.
    upkeep: UpkeepCalendar | None = None
    # Sessions and their memory flush (gateway/sessions.py, issue 21); set with the pipeline.
    sessions: Sessions | None = None
    # Set once the models loaded and turns run (and voice.preload finished): /healthz
    # says "starting" until then, while messages are already taken and stored.
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    # The persona file as read once at start (``{name}`` filled in): the prompt's
    # first block, Telegram's /start summary and the panel's persona page all show it.
    persona_text: str = ""
    # This process in a cluster (store.cluster, issue 25): membership, leases; else None.
    cluster: ClusterNode | None = None


GATEWAY = web.AppKey("gateway", Gateway)
