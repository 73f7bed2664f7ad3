"""A new user's channel, as small as the engine allows: the abstract methods
of nightjar_delivery.Channel and the record models, nothing else. It borrows
the tickets app's tables (a test needs no app of its own) but none of its
code: its bodies are {"id": n}, its handler notes what it handled."""

import json

from nightjar_delivery import Channel, ContractError, load_json, transport
from tickets.models import DeliveryFailure, ParkedDelivery, Redelivery, Registration, RejectedMessage, WorkerReport

HANDLED: list[int] = []  # the keys the handlers ran for, in order (the test clears it)


def handle(message, ack, pause):
    HANDLED.append(message)
    ack()


class MinimalChannel(Channel):
    name = "minimal"
    queue = "nightjar.test-minimal"
    intent_model = Registration
    intent_field = "registration"
    intent_time_field = "created"
    rejected_model = RejectedMessage
    failure_model = DeliveryFailure
    redelivery_model = Redelivery
    parked_model = ParkedDelivery
    worker_report_model = WorkerReport

    def decode(self, body):
        data = load_json(body)  # ContractError whatever the bytes
        if not isinstance(data, dict) or set(data) != {"id"} or type(data["id"]) is not int:
            raise ContractError('not {"id": n}')
        return data["id"]

    def intent_id(self, message):
        return message

    def check_stored(self, message, stored):
        if stored is None:
            raise ContractError(f"There is no intent {message}.")

    def default_handler(self):
        return "tests.minimal_channel.handle"

    def handle_batch(self, messages, rejections, ack_all, pause, stored):
        HANDLED.extend(messages)
        ack_all()
        return messages

    def publish(self, intent):
        transport.publish(json.dumps({"id": intent.pk}).encode(), message_id=f"minimal-{intent.pk}", queue=self.queue)

    def due(self, *, stored_before):
        return Registration.objects.filter(created__lte=stored_before).exclude(pk__in=HANDLED)

    def settled(self, intent_id):
        return intent_id in HANDLED
