"""The engine's one view of its user (delivery/channel.py): the channel
tickets registers answers every question the engine asks, and names record
models built on the engine's abstract ones."""

import pytest

from delivery import channel, records
from tickets.channel import RegistrationsChannel

pytestmark = pytest.mark.fast


def test_tickets_registers_the_registrations_channel():
    assert isinstance(channel.current(), RegistrationsChannel)


def test_the_registrations_channel_implements_every_method():
    asked = [name for name, value in vars(channel.Channel).items() if callable(value) and not name.startswith("_")]
    missing = [name for name in asked if getattr(RegistrationsChannel, name) is getattr(channel.Channel, name)]
    assert asked and missing == []


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
