"""The engine's one view of its user (nightjar_delivery/channel.py): the channel
tickets registers answers every question the engine asks, and names record
models built on the engine's abstract ones."""

import abc
import io

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, ManagementUtility, call_command
from django.utils import timezone

from nightjar_delivery import channel, records
from nightjar_tasks.models import TaskFailure
from tickets.channel import RegistrationsChannel
from tickets.models import Ticket

pytestmark = pytest.mark.fast


def test_tickets_registers_the_registrations_channel():
    assert isinstance(channel.current(), RegistrationsChannel)


def test_a_new_user_writes_only_what_its_domain_answers():
    """The abstract methods: the few a Channel subclass must write (the rest has defaults)."""
    assert sorted(channel.Channel.__abstractmethods__) == [
        "check_stored", "decode", "default_handler", "due", "handle_batch", "intent_id", "publish", "settled"
    ]  # fmt: skip


def test_the_record_models_are_the_engines_records():
    user = channel.current()
    assert issubclass(user.rejected_model, records.AbstractRejectedMessage)
    assert issubclass(user.failure_model, records.AbstractDeliveryFailure)
    assert issubclass(user.redelivery_model, records.AbstractRedelivery)
    assert issubclass(user.parked_model, records.AbstractParkedDelivery)
    assert issubclass(user.worker_report_model, records.AbstractWorkerReport)
    for model in (user.rejected_model, user.failure_model, user.redelivery_model, user.parked_model):
        assert model._meta.get_field(user.intent_field).related_model is user.intent_model


def test_the_hot_path_answers_as_the_contract_does():
    user = channel.current()
    message = user.decode(b'{"id":"R-0002","name":"Mina Patel","v":1}')
    assert user.intent_id(message) == 2
    assert user.label(2) == "R-0002"
    assert user.claimed_id(b'{"id":"R-0002","v":2}') == 2


class SecondChannel(RegistrationsChannel):
    """A second user of the engine: the registrations' meaning, its own name and queue."""

    name = "second"

    @property
    def queue(self) -> str:
        return "nightjar.test-second"


@pytest.fixture
def second():
    extra = SecondChannel()
    channel.register(extra)
    yield extra
    channel.unregister("second")
    channel.select(None)


def test_channels_are_found_by_name_and_the_default_is_registrations(second):
    assert [user.name for user in channel.all()] == ["registrations", "tasks", "second"]  # tasks: nightjar_tasks
    assert channel.get("second") is second and channel.current().name == "registrations"
    assert channel.select("second") is second and channel.current() is second
    channel.select(None)
    assert channel.current().name == "registrations"
    with pytest.raises(
        LookupError, match=r"No delivery channel is named 'third' \(registered: registrations, tasks, second\)"
    ):
        channel.get("third")
    with pytest.raises(ValueError, match="already registered"):
        channel.register(type("Other", (SecondChannel,), {})())


def test_without_registrations_the_only_channel_is_current_and_several_need_a_name(second, monkeypatch):
    monkeypatch.setattr(channel, "_channels", {"second": second})
    assert channel.current() is second
    monkeypatch.setattr(channel, "_channels", {"second": second, "third": SecondChannel()})
    with pytest.raises(LookupError, match=r"Several delivery channels are registered \(second, third\)"):
        channel.current()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("command", [["worker", "--drain"], ["reconcile"], ["parked"]])
def test_the_engine_s_commands_run_with_several_channels_and_none_the_default(command, second, monkeypatch):
    """A project of its own (no registrations; e.g. two task queues): the
    command's help, built before --channel is read, names no one channel,
    and the command serves the one named."""
    monkeypatch.setattr(channel, "_channels", {"second": second, "third": SecondChannel()})
    name = command[0]
    parser = ManagementUtility(["manage.py", name]).fetch_command(name).create_parser("manage.py", name)
    assert "--channel" in parser.format_help()
    call_command(*command, "--channel", "second", stdout=io.StringIO())
    with pytest.raises(CommandError, match=r"Several delivery channels are registered \(second, third\)"):
        call_command(*command, stdout=io.StringIO())


@pytest.mark.django_db(transaction=True)
def test_each_channel_consumes_only_its_own_queue(second):
    from nightjar_delivery import transport
    from tickets import contract
    from tickets.models import Registration, Ticket
    from tickets.services.registrations import register_guest

    first = register_guest(name="Mina Patel")  # published on the registrations queue
    other = Registration.objects.create(name="Ravi Shah")
    transport.publish(
        contract.encode(registration_id=other.id, name=other.name), message_id="second-1", queue=second.queue
    )
    assert transport.queue_counts(second.queue)["ready"] == transport.queue_counts(transport.queue_name())["ready"] == 1

    out = io.StringIO()
    call_command("worker", "--drain", "--channel", "second", stdout=out)
    assert out.getvalue().endswith("Drained 1 delivery; no ready registrations left.\n")
    assert list(Ticket.objects.values_list("registration_id", flat=True)) == [other.id]
    assert transport.queue_counts(transport.queue_name())["ready"] == 1  # the registrations' one is untouched

    call_command("worker", "--drain", stdout=io.StringIO())
    assert sorted(Ticket.objects.values_list("registration_id", flat=True)) == sorted([first.id, other.id])
    with pytest.raises(CommandError, match="No delivery channel is named 'third'") as refused:
        call_command("worker", "--drain", "--channel", "third")
    assert refused.value.returncode == 2


@pytest.mark.django_db(transaction=True)
def test_reconcile_and_parked_serve_the_named_channel_on_its_own_queue(second, settings):
    from nightjar_delivery import transport
    from tickets.models import Registration

    settings.NIGHTJAR_DELIVERY_LIMIT = 0  # the first return dead-letters it
    lost = Registration.objects.create(name="Ravi Shah")  # stored, its publish lost
    out = io.StringIO()
    call_command("reconcile", "--older-than", "0", "--channel", "second", stdout=out)
    assert out.getvalue().splitlines()[0] == lost.code.join(["Republished ", ""])
    assert transport.queue_counts(second.queue)["ready"] == 1
    assert transport.queue_counts(transport.queue_name())["ready"] == 0

    consumer = transport.Consumer(queue=second.queue)
    consumer.requeue(consumer.get().tag)  # a failed return: past the limit now
    assert consumer.get() is None  # moved to second's dead letters
    consumer.close()
    out = io.StringIO()
    call_command("parked", "--channel", "second", "collect", stdout=out)
    assert out.getvalue().splitlines()[0] == f"Requeued {lost.code} (dead-lettered by interruptions alone)"
    assert transport.queue_counts(second.queue)["ready"] == 1  # published again, on its own queue


@pytest.mark.django_db
def test_the_records_go_to_the_channel_named_not_the_current_one():
    """A process that serves several channels (the web, reconcile) writes each
    channel's records into that channel's tables, whichever is current."""
    from nightjar_delivery import recording
    from nightjar_delivery.transport import Delivery
    from nightjar_tasks.models import TaskRejectedMessage
    from tickets.models import RejectedMessage

    tasks = channel.get("tasks")
    assert channel.current().name == "registrations"
    delivery = Delivery(body=b"not json", message_id="m-1", redelivered=False, tag=1)
    recording.record_rejection(delivery=delivery, reason="not a task", channel=tasks)
    assert TaskRejectedMessage.objects.count() == 1 and RejectedMessage.objects.count() == 0
    recording.record_rejection(delivery=delivery, reason="not a registration", channel=channel.get("registrations"))
    assert RejectedMessage.objects.count() == 1
    with pytest.raises(TypeError, match="channel"):  # no silent fallback to the current channel
        recording.record_rejection(delivery=delivery, reason="whose?")


def test_two_channels_on_one_queue_fail_the_system_check(second, monkeypatch):
    from nightjar_delivery.checks import channels_have_queues_of_their_own

    assert channels_have_queues_of_their_own(None) == []  # registrations, tasks and second: three queues
    monkeypatch.setattr(SecondChannel, "queue", property(lambda self: channel.get("registrations").queue))
    (error,) = channels_have_queues_of_their_own(None)
    assert error.id == "nightjar.E005"
    shared = channel.get("registrations").queue
    assert error.msg == f"The delivery channels registrations and second share the queue {shared}."


@pytest.fixture
def minimal():
    from tests import minimal_channel

    minimal_channel.HANDLED.clear()
    registered = channel.register(minimal_channel.MinimalChannel)  # a class: checked, then instantiated
    yield registered
    channel.unregister("minimal")
    channel.select(None)


@pytest.mark.django_db(transaction=True)
def test_a_minimal_channel_registers_and_works_with_the_defaults(minimal):
    """Only the abstract methods and the models: reconcile publishes its
    pending intents (ordered by intent_time_field), the worker screens them
    (stored() reads intent_model), runs its handler and acks; a poison body is
    rejected (claimed_id from decode: a broken body names no intent);
    labels, find and the gauges come from the models."""
    from nightjar_delivery import transport
    from tests.minimal_channel import HANDLED
    from tickets.models import Registration, RejectedMessage

    first, second = Registration.objects.create(name="Mina Patel"), Registration.objects.create(name="Ravi Shah")
    out = io.StringIO()
    call_command("reconcile", "--older-than", "0", "--channel", "minimal", stdout=out)
    assert out.getvalue().splitlines()[:2] == [f"Republished {first.pk}", f"Republished {second.pk}"]
    assert minimal.gauges() == {"pending": 2, "parked": 0, "queue": transport.queue_counts(minimal.queue)}
    transport.publish(f'{{"id": {first.pk}, "extra": 1}}'.encode(), message_id="poison", queue=minimal.queue)

    out = io.StringIO()
    call_command("worker", "--drain", "--channel", "minimal", stdout=out)
    lines = out.getvalue().splitlines()
    assert (
        f"Received {first.pk} redelivered=False" in lines
        and lines[-1] == "Drained 3 deliveries; no ready intents left."
    )
    assert [first.pk, second.pk] == HANDLED
    (rejected,) = RejectedMessage.objects.all()
    assert rejected.registration is None and rejected.reason == 'not {"id": n}'  # (claimed_id: what decodes)
    assert minimal.pending_count(stored_before=timezone.now()) == 0 and minimal.settled(first.pk)
    assert minimal.find(str(second.pk)) == second and minimal.label(second.pk) == str(second.pk)
    with pytest.raises(channel.DomainError, match="There is no '999'"):
        minimal.find("999")
    with pytest.raises(channel.DomainError, match="'R-0001' is not a key of intents"):
        minimal.find("R-0001")
    assert minimal.actor("parked").endswith("(manage.py parked)")
    parser = ManagementUtility(["manage.py", "worker"]).fetch_command("worker").create_parser("manage.py", "worker")
    assert "minimal: tests.minimal_channel.handle" in " ".join(parser.format_help().split())
    minimal.record_staff_action(actor="x", action="requeue", intent=first, detail="")  # no staff_action_model: nothing


@pytest.mark.django_db(transaction=True)
def test_a_channel_with_effects_outside_the_database_is_never_run_in_batches(minimal, monkeypatch):
    """A failed batch is retried one delivery at a time: for a handler that
    sends mail, that would send its neighbours' mails again. Refused with a
    sentence, before anything is taken from the broker."""
    from nightjar_delivery import transport
    from tests.minimal_channel import HANDLED
    from tickets.models import Registration

    monkeypatch.setattr(minimal, "effects_outside_database", True)
    intent = Registration.objects.create(name="Mina Patel")
    minimal.publish(intent)
    with pytest.raises(CommandError, match="has effects outside the database") as refused:
        call_command("worker", "--drain", "--channel", "minimal", "--batch", "10", stdout=io.StringIO())
    assert refused.value.returncode == 2 and "Run it without --batch." in str(refused.value)
    assert transport.queue_counts(minimal.queue)["ready"] == 1 and HANDLED == []
    call_command("worker", "--drain", "--channel", "minimal", stdout=io.StringIO())  # one delivery at a time
    assert [intent.pk] == HANDLED


def _incomplete(**attributes):
    from tests.minimal_channel import MinimalChannel

    return type("Incomplete", (MinimalChannel,), attributes)


@pytest.mark.parametrize(
    ("attributes", "missing"),
    [
        ({"decode": abc.abstractmethod(lambda self, body: None)}, "it does not define decode"),
        ({"name": ""}, "its name is empty"),
        ({"queue": ""}, "its queue is empty"),
        ({"intent_model": None}, "intent_model is not set to a model"),
        ({"intent_field": ""}, "intent_field is not set"),
        ({"rejected_model": None}, "rejected_model is not a subclass of records.AbstractRejectedMessage"),
        ({"parked_model": Ticket}, "parked_model is not a subclass of records.AbstractParkedDelivery"),
        ({"failure_model": TaskFailure}, "failure_model has no foreign key 'registration' to Registration"),
        ({"intent_time_field": ""}, "intent_time_field names no field of Registration (the default stored() reads it)"),
    ],
)
def test_an_incomplete_channel_is_refused_naming_what_is_missing(attributes, missing):
    with pytest.raises(ImproperlyConfigured) as refused:
        channel.register(_incomplete(**attributes))
    assert str(refused.value) == f"The delivery channel Incomplete cannot be registered: {missing}."
    assert "minimal" not in channel.names()


def test_a_channel_missing_several_methods_is_told_each_of_them():
    class Bare(channel.Channel):
        name = "bare"

    with pytest.raises(ImproperlyConfigured) as refused:
        channel.register(Bare)
    assert str(refused.value).startswith(
        "The delivery channel Bare cannot be registered: it does not define check_stored, decode, default_handler, "
        "due, handle_batch, intent_id, publish, settled; intent_model is not set to a model; intent_field is not set;"
    )
    with pytest.raises(ImproperlyConfigured, match="object is not a subclass of nightjar_delivery.Channel"):
        channel.register(object())


def test_without_the_default_setting_several_channels_need_a_name(second, settings):
    settings.NIGHTJAR_DEFAULT_CHANNEL = ""
    with pytest.raises(LookupError, match=r"Several delivery channels are registered \(registrations, tasks, second\)"):
        channel.current()
    settings.NIGHTJAR_DEFAULT_CHANNEL = "second"
    assert channel.current() is second


def test_a_default_channel_not_registered_or_an_emptied_queue_fails_the_system_check(settings):
    from nightjar_delivery.checks import channels_have_queues_of_their_own

    settings.NIGHTJAR_DEFAULT_CHANNEL = "registration"
    settings.NIGHTJAR_QUEUE = ""
    assert sorted((error.id, error.msg) for error in channels_have_queues_of_their_own(None)) == [
        ("nightjar.E002", "The queue of the delivery channel registrations is empty."),
        (
            "nightjar.E006",
            "NIGHTJAR_DEFAULT_CHANNEL names no registered delivery channel ('registration'; registered: registrations, tasks).",
        ),
    ]
