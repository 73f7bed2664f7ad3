"""The registrations channel: what the delivery engine asks of tickets
(delivery/channel.py says what each method promises). Registered in
TicketsConfig.ready(); thin, every answer comes from the contract, the
models or the services."""

from delivery import channel, conf
from tickets import batch, contract, lab
from tickets.models import (
    DeliveryFailure,
    ParkedDelivery,
    Redelivery,
    Registration,
    RejectedMessage,
    Ticket,
    WorkerReport,
)
from tickets.services import parking, reconcile, staff, status


class RegistrationsChannel(channel.Channel):
    name = "registrations"

    @property
    def queue(self) -> str:
        return conf.NIGHTJAR_QUEUE

    # The hot path: bound once, no extra call per delivery.
    decode = staticmethod(contract.decode)
    label = staticmethod(contract.format_code)
    hinted_ids = staticmethod(contract.hinted_ids)
    check_stored = staticmethod(contract.check_stored)
    claimed_id = staticmethod(contract.claimed_id)
    handler_help = lab.SAFE_HANDLER
    intent_model = Registration
    intent_field = "registration"
    rejected_model = RejectedMessage
    failure_model = DeliveryFailure
    redelivery_model = Redelivery
    parked_model = ParkedDelivery
    worker_report_model = WorkerReport

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
        return lab.default_handler()

    def load_handler(self, spec):
        return lab.load_handler(spec)  # lab.HandlerError is a channel.HandlerError

    def handle_batch(self, messages, rejections, ack_all, pause):
        return batch.handle_batch(messages, rejections, ack_all, pause)

    def reconcile(self, **options):
        return reconcile.reconcile_registrations(**options)

    def collect_dead_letters(self):
        return parking.collect_dead_letters()

    # NightjarError is a channel.DomainError: the commands exit 1 with its sentence.
    def requeue_parked(self, *, code, actor):
        return parking.requeue_parked(code=code, actor=actor).code

    def discard_parked(self, *, code, actor):
        return parking.discard_parked(code=code, actor=actor).code

    def parked_lines(self):
        waiting = ParkedDelivery.objects.filter(resolution="").select_related("registration")
        lines = []
        for parked in waiting:
            code = parked.registration.code if parked.registration else "(no registration)"
            lines.append(
                f"{code}  parked {parked.parked:%Y-%m-%d %H:%M:%S}  after {parked.attempts} deliveries  {parked.reason}"
            )
        return lines

    def actor(self, command):
        return staff.command_line_actor(command)

    def gauges(self):
        return status.desk_gauges()
