"""Continuous batching over static decode slots: a row that finishes frees its slot for the
next waiting row of the same call, instead of the batch shrinking while the next chunk waits.

The transformers engine's static path (:mod:`agentfly.rollout.engines.static_decode`). Each
iteration samples every busy slot, lets the finished rows go (their K/V to the prefix cache), runs
one decode step for the rest, and prefills waiting rows into the free slots (a prefill reuses
cached prefixes as the dynamic path does). Sampling is the dynamic path's: the same
:func:`~agentfly.rollout.engines.sampling.sample_tokens` over the same logits, and each
generator draws for its rows in row order, so a call whose rows all fit the slots draws the
uniforms the dynamic path draws. With more rows than slots the rows sharing a generator draw in
another order than chunk by chunk (seeded calls still reproduce); greedy rows never draw.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from agentfly.rollout.engines.sampling import draw_uniforms, sample_tokens, truncates

if TYPE_CHECKING:
    from agentfly.rollout.engines.static_decode import StaticDecoder


class ContinuousBatch:
    """One generate call's rows, decoded through ``decoder_for``'s slots.

    Args:
        engine: the :class:`~agentfly.rollout.engines.transformers_engine.TransformersEngine`
            (its model, prefill, stop rules and prefix cache; typed ``Any``: that module
            imports this one).
        rows: the call's rows (the engine's ``_Row``), in request order; each gets its tokens,
            log-probs and finish.
        slots: slots to decode in.
        decoder_for: builds (or reuses) the decoder for ``slots`` given the first prefill's
            cache (see :class:`~agentfly.rollout.engines.static_decode.StaticDecoder`).
    """

    def __init__(self, engine: Any, rows: list[Any], slots: int, decoder_for: Any) -> None:
        self.engine, self.rows, self.slots = engine, rows, slots
        self.decoder_for = decoder_for
        self.decoder: StaticDecoder | None = None
        self.limits = [
            min(r.sampling.max_tokens, engine.max_model_len - len(r.prompt)) for r in rows
        ]
        self.stop_ids = [engine._stop_ids(r.sampling) for r in rows]
        self.waiting = deque(range(len(rows)))
        self.slot_row: list[int | None] = [None] * slots  # the row each slot decodes
        self.lengths = [0] * slots  # positions holding K/V, per slot
        self.params: tuple[Any, Any, Any] | None = None  # temperature, top_p, top_k: (slots,)

    def run(self) -> None:
        """Generate every row."""
        import torch

        with torch.inference_mode():
            logits = self._admit(None)  # (slots, V)
            while any(r is not None for r in self.slot_row):
                chosen = self._sample(logits)
                going_on = self._append(chosen)
                if going_on:
                    pad = self.engine.pad_token_id
                    ids = [going_on.get(s, pad) for s in range(self.slots)]
                    positions = [self.lengths[s] if s in going_on else 0 for s in range(self.slots)]
                    logits = self.decoder.step(ids, positions)
                    for s in going_on:
                        self.lengths[s] += 1
                if self.waiting and None in self.slot_row:
                    logits = self._admit(logits)

    def _sample(self, logits: Any) -> dict[int, tuple[int, float]]:
        """A token and its log-probability for every busy slot."""
        busy = sorted((i, s) for s, i in enumerate(self.slot_row) if i is not None)  # row order
        groups: dict[int, tuple[list[int], Any]] = {}
        for i, s in busy:
            row = self.rows[i]
            if not row.sampling.greedy:
                groups.setdefault(id(row.generator), ([], row.generator))[0].append(s)
        temperature, top_p, top_k = self.params
        chosen, logprobs = sample_tokens(
            logits,  # (slots, V); free slots are sampled greedily and ignored
            temperature,
            top_p,
            top_k,
            draw_uniforms(list(groups.values()), self.engine.device),
            truncated=any(
                truncates(self.rows[i].sampling)
                for i, _ in busy
                if not self.rows[i].sampling.greedy
            ),
        )
        ids, logps = chosen.tolist(), logprobs.tolist()
        return {s: (ids[s], logps[s]) for _, s in busy}

    def _append(self, chosen: dict[int, tuple[int, float]]) -> dict[int, int]:
        """Append each busy slot's token to its row; free the slots of the rows that finish
        (their K/V to the prefix cache). Returns the slots that go on, with their token."""
        engine, going_on, finished = self.engine, {}, []
        for s, (token, logprob) in chosen.items():
            i = self.slot_row[s]
            row = self.rows[i]
            row.tokens.append(token)
            row.logprobs.append(logprob)
            if token in self.stop_ids[i] or engine._hits_stop(row):
                row.finish = "stop"
            elif len(row.tokens) >= self.limits[i]:
                row.finish = "length"
            else:
                going_on[s] = token
                continue
            finished.append((s, row.prompt + row.tokens[:-1]))  # the last was never fed
        if finished and engine._prefixes.store is not None:
            engine._prefixes.remember(finished, self.decoder.cache, self.decoder.mask(self.lengths))
        for s, _ in finished:
            self.slot_row[s] = None
        return going_on

    def _admit(self, logits: Any) -> Any:
        """Prefill waiting rows into the free slots; returns ``logits`` (slots, V) with the
        admitted slots' rows replaced by their prompts' next-token logits."""
        import torch

        engine = self.engine
        free = [s for s, i in enumerate(self.slot_row) if i is None]
        admitted = [(s, self.waiting.popleft()) for s in free[: len(self.waiting)]]
        # identical prompts (a request's n rows, or chains of one task) are prefilled once
        distinct: dict[tuple[int, ...], int] = {}
        sources = [
            distinct.setdefault(tuple(self.rows[i].prompt), len(distinct)) for _, i in admitted
        ]
        out, attention_mask, _ = engine._prefill(list(distinct), 0, torch)  # (U, C + S) mask
        if self.decoder is None:
            self.decoder = self.decoder_for(out.past_key_values)
        slots = [s for s, _ in admitted]
        self.decoder.fill(slots, out.past_key_values, attention_mask, sources)
        first = out.logits[:, -1, :].float()  # (U, V)
        if logits is None:
            logits = first.new_zeros((self.slots, first.shape[-1]))
        index = torch.tensor(sources, device=first.device)
        logits.index_copy_(
            0, torch.tensor(slots, device=first.device), first.index_select(0, index)
        )
        for s, i in admitted:
            self.slot_row[s], self.lengths[s] = i, len(self.rows[i].prompt)
        self._set_params()
        return logits

    def _set_params(self) -> None:
        """Each slot's sampling settings on the device (free slots: greedy)."""
        import torch

        samplings = [self.rows[i].sampling if i is not None else None for i in self.slot_row]
        temperature = [sp.temperature if sp else 0.0 for sp in samplings]
        top_p = [sp.top_p if sp else 1.0 for sp in samplings]
        top_k = [sp.top_k if sp else -1 for sp in samplings]
        device = self.engine.device
        self.params = (
            torch.tensor(temperature, dtype=torch.float32, device=device),
            torch.tensor(top_p, dtype=torch.float32, device=device),
            torch.tensor(top_k, dtype=torch.long, device=device),
        )
