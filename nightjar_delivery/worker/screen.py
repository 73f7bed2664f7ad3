"""Screen, the one path for a batch of one as for a batch: decode each body
(the channel's contract), read the stored intents in one query (a single
delivery's with those already waiting: read_ahead), note the redeliveries for
staff, and check each message against its own stored intent."""

import time

from nightjar_delivery import recording, transport
from nightjar_delivery.channel import Channel
from nightjar_delivery.codec import ContractError
from nightjar_delivery.worker.receive import Receiver


class Screen:
    """Owns the rows read ahead (ahead, ahead_read): a single delivery's row
    is read with those of the deliveries waiting in the receiver."""

    def __init__(self, *, channel: Channel, name: str, receiver: Receiver) -> None:
        self.channel = channel
        self.name = name
        self.receiver = receiver
        # Rows read ahead for deliveries already received (see read_ahead).
        self.ahead: dict[int, tuple[object, float]] = {}
        self.ahead_read = 0.0

    def check(self, deliveries: list[transport.Delivery], *, batch: bool) -> tuple[list, list, dict]:
        """Decode every body (the contract), read the stored intents in one
        query (outside batch mode with those of the deliveries already
        waiting: see read_ahead), note redeliveries, and check each message
        against its own stored intent. Returns (accepted: [(delivery,
        message, key)], rejections: [(delivery, reason)], stored: {key: (what,
        when stored)}); the settler records the rejections before it acks them."""
        channel = self.channel
        decoded, rejections = [], []
        for delivery in deliveries:
            try:
                message = channel.decode(delivery.body)
            except ContractError as error:
                rejections.append((delivery, str(error)))
                continue
            decoded.append((delivery, message, channel.intent_id(message)))
        keys = {key for _, _, key in decoded}
        stored = self.read_ahead(*keys) if len(keys) == 1 and not batch else channel.stored(keys)  # {} for none
        self.note_redeliveries(deliveries, {delivery.tag: key for delivery, _, key in decoded})
        accepted = []
        for delivery, message, key in decoded:
            try:
                channel.check_stored(message, stored.get(key, (None,))[0])
            except ContractError as error:
                rejections.append((delivery, str(error)))
                continue
            accepted.append((delivery, message, key))
        return accepted, rejections, stored

    def note_redeliveries(self, deliveries: list[transport.Delivery], keys: dict) -> None:
        """Staff see in an intent's history when it came again: one row per
        redelivery, one statement per batch, nothing for a first delivery.
        keys: {tag: intent key} of the deliveries that decoded."""
        again = [delivery for delivery in deliveries if delivery.redelivered]
        if again:
            pairs = [(keys.get(d.tag), d.attempts + 1) for d in again]
            recording.record_redeliveries(deliveries=pairs, worker=self.name, channel=self.channel)

    def read_ahead(self, key: int) -> dict[int, tuple[object, float]]:
        """The stored intent of one delivery ({} if there is none), read in one
        query with those of the deliveries already waiting in the receiver,
        as a batch reads its own: a delivery finds its row read at most a
        second before (else read again) and each row serves one delivery.
        Saves a query per delivery — on PostgreSQL a round trip
        (bin/benchmark.py, pairs)."""
        if time.monotonic() - self.ahead_read < 1.0 and key in self.ahead:
            return {key: self.ahead.pop(key)}
        ids = {key} | self.channel.hinted_ids(self.receiver.waiting())
        self.ahead, self.ahead_read = self.channel.stored(ids), time.monotonic()
        found = self.ahead.pop(key, None)
        return {key: found} if found is not None else {}
