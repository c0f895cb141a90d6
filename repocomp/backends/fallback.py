"""A backend answered by another when it fails: `make_backend` wraps the configured one with the extractive backend
(`[backend] fallback = "extractive"`)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from repocomp.backends.base import Backend, Capabilities, Generation, GenerationRequest, PrefillingBackend
from repocomp.errors import BackendError

__all__ = ["FallbackBackend"]

log = logging.getLogger(__name__)


class FallbackBackend:
    """Answers with `primary`; on a BackendError, with `fallback`, saying so in the Generation (`fell_back`,
    `error`). It is its primary to its callers: the primary's name, capabilities and stats."""

    def __init__(self, primary: Backend, fallback: Backend) -> None:
        self.primary = primary
        self.fallback = fallback
        self.name = primary.name

    @property
    def capabilities(self) -> Capabilities:
        return self.primary.capabilities

    async def agenerate(self, request: GenerationRequest) -> Generation:
        try:
            return await self.primary.agenerate(request)
        except BackendError as exc:
            log.warning("backend %s failed (%s); answering with %s", self.primary.name, exc, self.fallback.name)
            gen = await self.fallback.agenerate(request)
            return Generation(text=gen.text, backend=gen.backend, error=f"{self.primary.name}: {exc}",
                              copied=gen.copied, fell_back=True)

    async def astream(self, request: GenerationRequest) -> AsyncIterator[str]:
        """Streams from the primary when it can stream; falls back only if it fails before yielding text."""
        stream = getattr(self.primary, "astream", None)
        if stream is None:
            yield (await self.agenerate(request)).text
            return
        started = False
        try:
            async for piece in stream(request):
                started = True
                yield piece
        except BackendError as exc:
            if started:
                raise  # half a completion plus another backend's guess would be nonsense
            log.warning("backend %s failed (%s); answering with %s", self.primary.name, exc, self.fallback.name)
            yield (await self.fallback.agenerate(request)).text

    async def aprefill(self, request: GenerationRequest) -> bool:
        """The primary's prefill; False where it has none or it fails (the request that follows says why)."""
        if not isinstance(self.primary, PrefillingBackend):
            return False
        try:
            return await self.primary.aprefill(request)
        except BackendError as exc:
            log.debug("backend %s could not prefill: %s", self.primary.name, exc)
            return False

    async def aload(self) -> None:
        try:
            await self.primary.aload()
        except Exception as exc:  # noqa: BLE001 - the first request reports it (and the fallback answers it)
            log.warning("backend %s could not load (%s: %s)", self.primary.name, type(exc).__name__, exc)

    async def aclose(self) -> None:
        try:
            await self.primary.aclose()
        finally:
            await self.fallback.aclose()

    def stats(self) -> dict[str, Any]:
        return self.primary.stats()
