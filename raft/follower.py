"""The follower's side of `RaftNode`: accepting (or rejecting, with a hint) the leader's
entries, resetting to the leader's log boundary, and keeping the configuration in force in step
with the log (the latest configuration entry rules, so a truncated one reverts)."""

from __future__ import annotations

from raft.codec import decode_config_entry
from raft.errors import InvariantViolation
from raft.node_state import NodeState
from raft.types import AppendRequest, AppendResponse, Configuration, Entry, EntryKind, LogReset

__all__ = ["FollowerMixin"]


class FollowerMixin(NodeState):
    def _on_append(self, m: AppendRequest) -> None:
        log = self.log
        if m.prev_index < self.commit:
            self._send(AppendResponse(self.term, self.id, m.sender, self.commit))
            return
        if not log.match_term(m.prev_index, m.prev_term):
            hint_index = min(m.prev_index, log.last_index)
            hint_index, hint_term = log.find_conflict_by_term(hint_index, m.prev_term)
            reply = AppendResponse(
                self.term, self.id, m.sender, m.prev_index, True, hint_index, hint_term
            )
            self._send(reply)
            return
        last_new = m.prev_index + len(m.entries)
        conflict = log.find_conflict(m.entries)
        if conflict:
            if conflict <= self.commit:
                raise InvariantViolation(
                    f"node {self.id}: entry {conflict} conflicts but is committed "
                    f"(commit {self.commit})"
                )
            self._write_entries(m.entries[conflict - m.prev_index - 1 :])
        self.commit = max(self.commit, min(m.commit, last_new))
        self._send(AppendResponse(self.term, self.id, m.sender, last_new))

    def _on_reset(self, m: LogReset) -> None:
        boundary = m.boundary
        if boundary.index <= self.commit:
            self._send(AppendResponse(self.term, self.id, m.sender, self.commit))
            return
        if self.log.match_term(boundary.index, boundary.term):
            self.commit = boundary.index  # the log agrees up to there: keep it
        else:
            self.log.restore(boundary)
            self._boundary_state = m.state
            self.commit = self._applied = self._durable_index = boundary.index
            config = boundary.config if boundary.config is not None else self._configuration
            self._configs = [(boundary.index, config)]
            self._use_configuration(config)
        self._send(AppendResponse(self.term, self.id, m.sender, boundary.index))

    def _write_entries(self, entries: tuple[Entry, ...] | list[Entry]) -> None:
        """Appends or overwrites from entries[0].index, keeping the configuration in step."""
        first = entries[0].index
        if first <= self.log.last_index:
            self._durable_index = min(self._durable_index, first - 1)
            while len(self._configs) > 1 and self._configs[-1][0] >= first:
                self._configs.pop()
        self.log.append(entries)
        for entry in entries:
            if entry.kind is EntryKind.CONFIG:
                self._configs.append((entry.index, decode_config_entry(entry.data)[1]))
        if self._configs[-1][1] != self._configuration:
            self._use_configuration(self._configs[-1][1])

    def _config_at(self, index: int) -> Configuration:
        for config_index, config in reversed(self._configs):
            if config_index <= index:
                return config
        return self._configs[0][1]
