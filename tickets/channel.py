"""The registrations channel: what the delivery engine asks of tickets
(nightjar_delivery/channel.py says what each method promises). Registered in
TicketsConfig.ready(); thin, every answer comes from the contract, the
models or the services; what is not here (pending and its count, the
staff trace's row) is the engine's default, derived from the models."""

from django.db.models import Q

from nightjar_delivery import Channel
from tickets import batch, conf, contract, handlers, metrics
from tickets.models import (
    DeliveryFailure,
    ParkedDelivery,
    Redelivery,
    Registration,
    RejectedMessage,
    StaffAction,
    Ticket,
    WorkerReport,
)
from tickets.services import registrations, status
from tickets.services.registrations import NightjarError, has_key, has_ticket


class RegistrationsChannel(Channel):
    name = "registrations"
    intents = "registrations"
    outcome = "ticket"

    @property
    def queue(self) -> str:
        return conf.NIGHTJAR_QUEUE

    # The hot path: bound once, no extra call per delivery.
    decode = staticmethod(contract.decode)
    label = staticmethod(contract.format_code)
    hinted_ids = staticmethod(contract.hinted_ids)
    check_stored = staticmethod(contract.check_stored)
    claimed_id = staticmethod(contract.claimed_id)
    handler_help = (
        f"NIGHTJAR_HANDLER; in lab mode the learner's lab/handler.py once `lab start` made it; "
        f"else {handlers.SAFE_HANDLER}"
    )
    teaches_checkpoints = True  # the lab's exercise: the worker paused or crashed at each checkpoint
    intent_model = Registration
    intent_field = "registration"
    intent_time_field = "created"
    rejected_model = RejectedMessage
    failure_model = DeliveryFailure
    redelivery_model = Redelivery
    parked_model = ParkedDelivery
    worker_report_model = WorkerReport
    staff_action_model = StaffAction
    latency = metrics.LATENCY

    @staticmethod
    def intent_id(message: contract.Message) -> int:
        return message.registration_id

    @staticmethod
    def stored(ids):
        return Registration.objects.stored(ids)

    @staticmethod
    def made_since(intent_id, since) -> bool:
        return Ticket.objects.made_since(intent_id, since)

    def default_handler(self) -> str:
        return handlers.default_handler()

    def load_handler(self, spec):
        return handlers.load_handler(spec)  # handlers.HandlerError is a nightjar_delivery.HandlerError

    def handle_batch(self, messages, rejections, ack_all, pause, stored):
        # (the messages carry what it writes; the rejections are recorded as this channel's)
        return batch.handle_batch(messages, rejections, ack_all, pause, channel=self)

    # Reconcile and parking run in the engine (nightjar_delivery/reconcile.py); these are the domain's answers.
    refusal = NightjarError

    def due(self, *, stored_before):
        return registrations.pending_registrations().filter(created__lte=stored_before)

    def publish(self, intent):
        registrations.publish_registration(intent, queue=self.queue)

    def republished(self, intents, *, actor, older_than):
        detail = f"Reconcile published it again (no ticket {older_than:g} s after registering)."
        StaffAction.objects.bulk_create(
            StaffAction(actor=actor[:150], action="republish", registration=registration, detail=detail)
            for registration in intents
        )

    @staticmethod
    def settled(intent_id):
        # Done, or a ticket without its key (publishing it again would make a
        # second ticket; audit reports it, repair adds the key).
        return Registration.objects.filter(Q(has_key()) | Q(has_ticket()), pk=intent_id).exists()

    def find(self, label):
        return registrations.find_registration(code=label)

    def refuse_republish(self, intent, what):
        registrations.refuse_without_seat(intent, what)
        registrations.refuse_ticket_without_key(intent, what)

    def gauges(self):
        return status.desk_gauges()
