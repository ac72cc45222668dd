"""The handle ``DataStream.collect()`` returns: a ``collect()`` sink's records on the driver.

``handle.get()`` is the one call for them, whatever the job's state: while the job runs
(``env.execute_async``) the records published so far (under checkpointing, those of completed
checkpoints: exactly once across restarts; without, as they arrive); once it finished, all of
them. ``JobClient.collected(handle)`` and ``JobResult.collected[handle.collect_id]`` read the
same records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from epochal.errors import PlanError

if TYPE_CHECKING:
    from epochal.api.environment import Environment


class CollectedStream:
    """Handle of a ``collect()`` sink: its records on the driver (see :meth:`get`)."""

    def __init__(self, env: Environment, collect_id: str) -> None:
        self._env = env
        self.collect_id = collect_id

    def get(self) -> list[Any]:
        """The records the sink published in the environment's latest job: so far while it runs,
        every one once it finished (also after it failed or was cancelled: what was published).

        Raises :class:`PlanError` when no job of the environment has been started."""
        env = self._env
        client, result = env.last_client, env.last_result
        if client is not None and (result is None or not client.done):
            return client.collected(self.collect_id)
        if result is not None:
            return list(result.collected.get(self.collect_id, []))
        raise PlanError("no job of this Environment has been started, so this collect() has no records: call "
                        "env.execute(...) (get() then returns every record) or env.execute_async(...) (get() "
                        "returns the records collected so far while it runs)")

    def __iter__(self):
        return iter(self.get())

    def __repr__(self) -> str:
        return f"CollectedStream({self.collect_id!r})"
