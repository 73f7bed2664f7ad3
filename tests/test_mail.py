"""Mail to guests (mail/): each fact stores its mail in its own transaction,
and the sender delivers it at least once with one Message-ID, against a real
SMTP server (devtools/mailserver.py: aiosmtpd on loopback, in a thread of the
test) that can refuse, dawdle or vanish. Fast tier: the sender runs in this
process; the sender as a real process killed -9 is in tests/test_mail_sender.py."""

import pytest
from django.db import transaction
from django.urls import reverse

from mail import outbox, sender
from mail.models import Kind, Mail, State
from tests.test_seats import drain
from tickets.models import Registration
from tickets.services import seats
from tickets.services.registrations import register_guest
from tickets.services.tickets import issue_ticket

pytestmark = [pytest.mark.fast, pytest.mark.django_db(transaction=True)]

STAFF = "organiser (test)"


def send_due() -> list[sender.Outcome]:
    return [sender.deliver(mail) for mail in sender.claim_due()]


def kinds(registration: Registration) -> list[str]:
    return list(registration.mails.order_by("id").values_list("kind", flat=True))


def test_each_fact_stores_its_mail_once_in_its_own_transaction():
    seats.set_capacity(capacity=1, actor=STAFF)
    seated = register_guest(name="Ada Seated", email="ada@example.org")
    waiting = register_guest(name="Bo Waiting", email="bo@example.org")
    no_address = register_guest(name="Cy Nomail")
    assert kinds(seated) == [] and kinds(waiting) == [Kind.WAITING]
    assert waiting.mails.get().place == 1
    drain()  # the worker issues Ada's ticket
    assert kinds(seated) == [Kind.TICKET]
    seats.cancel_registration(registration=seated, actor=STAFF)  # Bo gets the seat
    assert kinds(seated) == [Kind.TICKET, Kind.CANCELLED]
    assert kinds(waiting) == [Kind.WAITING, Kind.SEAT]
    drain()  # and then Bo's ticket
    drain()  # a second pass (nothing to redeliver) stores nothing more
    assert kinds(waiting) == [Kind.WAITING, Kind.SEAT, Kind.TICKET]
    assert list(no_address.mails.all()) == [] and Mail.objects.count() == 5
    assert all(mail.state == State.WAITING and mail.attempts == 0 for mail in Mail.objects.all())
    assert len({mail.message_id for mail in Mail.objects.all()}) == 5


def test_a_rolled_back_fact_leaves_no_mail():
    seats.set_capacity(capacity=1, actor=STAFF)
    seated = register_guest(name="Ada Seated", email="ada@example.org")
    waiting = register_guest(name="Bo Waiting", email="bo@example.org")
    Mail.objects.all().delete()
    with pytest.raises(RuntimeError), transaction.atomic():
        seats.cancel_registration(registration=seated, actor=STAFF)
        issue_ticket(registration_id=seated.pk, name=seated.name)
        assert Mail.objects.count() == 3  # cancelled, seat, ticket: stored with the facts...
        raise RuntimeError("the fact's transaction fails")
    assert Mail.objects.count() == 0  # ...and gone with them
    with pytest.raises(RuntimeError), transaction.atomic():
        register_guest(name="Cy Waiting", email="cy@example.org")
        raise RuntimeError("the registration's transaction fails")
    assert Mail.objects.count() == 0 and Registration.objects.count() == 2
    assert Registration.objects.get(pk=waiting.pk).seat == "waiting"


def test_the_tickets_mail_takes_the_address_the_screening_read_and_reads_it_itself_otherwise(monkeypatch):
    """The worker's screening reads the registration's row (its name, its
    seat and its address) just before the handler issues the ticket: the
    mail's address comes from that read, not from a statement of its own per
    ticket (on PostgreSQL a round trip per delivery); without that read, the
    mail reads the address itself, and a guest without one gets no mail."""
    ada = register_guest(name="Ada Read", email="ada@example.org")
    bo = register_guest(name="Bo Unread", email="bo@example.org")
    cy = register_guest(name="Cy Nomail")
    statements = []  # the mail's own (the engine's plain cursor, which Django's query log does not see)
    execute = outbox.sql.execute
    monkeypatch.setattr(outbox.sql, "execute", lambda *args, **kw: statements.append(args[0]) or execute(*args, **kw))
    Registration.objects.stored([ada.pk, cy.pk])  # what the screening reads, for this delivery and the next
    statements.clear()
    assert outbox.addresses([ada.pk, cy.pk]) == [(ada.pk, "ada@example.org")]
    assert statements == []
    # Bo's row was not read: his address is, in one statement.
    assert outbox.addresses([bo.pk, ada.pk]) == [(ada.pk, "ada@example.org"), (bo.pk, "bo@example.org")]
    assert len(statements) == 1
    for registration in (ada, bo, cy):
        with transaction.atomic():
            issue_ticket(registration_id=registration.pk, name=registration.name)
    assert kinds(ada) == kinds(bo) == [Kind.TICKET] and kinds(cy) == []
    assert Mail.objects.get(registration=bo).address == "bo@example.org"


def test_each_mail_is_sent_once_with_its_message_id_link_and_ticket(smtp):
    guest = register_guest(name="Zoë O'Brien & co", email="zoe@example.org")
    drain()
    [outcome] = send_due()
    assert outcome.state == State.SENT and outcome.reply.startswith("250")
    [received] = smtp.received
    mail = Mail.objects.get()
    assert received.recipients == ["zoe@example.org"] and received.message_id == mail.message_id
    message = received.message
    assert message["Subject"] == f"Your ticket for the evening ({guest.code})"
    plain = message.get_body(("plain",)).get_content()
    html = message.get_body(("html",)).get_content()
    link = "https://nightjar.example.org" + reverse("registration", args=[guest.code, guest.secret])
    assert link in plain and f'href="{link}"' in html
    assert "Hello Zoë O'Brien & co," in plain and "Zoë O&#x27;Brien &amp; co" in html
    [pdf] = [part for part in message.iter_attachments() if part.get_content_type() == "application/pdf"]
    ticket = guest.tickets.get()
    assert (
        pdf.get_filename() == f"nightjar-ticket-{guest.code}-{ticket.number}.pdf" and pdf.get_content()[:5] == b"%PDF-"
    )
    mail.refresh_from_db()
    assert (mail.state, mail.attempts, mail.last_reply) == (State.SENT, 1, outcome.reply) and mail.sent
    assert send_due() == [] and len(smtp.received) == 1  # sent is final


def test_a_temporary_refusal_is_retried_with_the_same_message_id(smtp):
    register_guest(name="Ada", email="ada@example.org")
    drain()
    smtp.rules.rcpt["ada@example.org"] = "451 4.7.1 Greylisted, try again later"
    [outcome] = send_due()
    mail = Mail.objects.get()
    assert (outcome.state, mail.state, mail.attempts) == (State.RETRYING, State.RETRYING, 1)
    assert mail.last_reply == "451 4.7.1 Greylisted, try again later"
    smtp.rules.rcpt.clear()
    [outcome] = send_due()
    mail.refresh_from_db()
    assert (mail.state, mail.attempts) == (State.SENT, 2)
    assert [received.message_id for received in smtp.received] == [mail.message_id]


def test_a_permanent_refusal_fails_at_once_with_the_servers_sentence_and_holds_back_no_one(smtp):
    register_guest(name="Bad Address", email="nobody@example.org")
    register_guest(name="Good Address", email="good@example.org")
    drain()
    smtp.rules.rcpt["nobody@example.org"] = "550 5.1.1 <nobody@example.org>: Recipient address rejected"
    assert [outcome.state for outcome in send_due()] == [State.FAILED, State.SENT]
    bad = Mail.objects.get(address="nobody@example.org")
    assert (bad.state, bad.attempts) == (State.FAILED, 1)
    assert bad.last_reply == "550 5.1.1 <nobody@example.org>: Recipient address rejected"
    assert [received.recipients for received in smtp.received] == [["good@example.org"]]
    assert send_due() == []  # failed is final (staff may resend)


def test_a_refusal_of_the_message_itself_is_permanent_too(smtp):
    register_guest(name="Ada", email="ada@example.org")
    drain()
    smtp.rules.data_answer = "554 5.6.0 Message rejected as spam"
    [outcome] = send_due()
    assert (outcome.state, outcome.reply) == (State.FAILED, "554 5.6.0 Message rejected as spam")
    assert smtp.received == []


def test_the_server_down_then_back_sends_everything_once(smtp, settings):
    for name in ("Ada", "Bo"):
        register_guest(name=name, email=f"{name.lower()}@example.org")
    drain()
    smtp.stop()
    outcomes = send_due()
    assert [outcome.state for outcome in outcomes] == [State.RETRYING, State.RETRYING]
    assert all("No answer from 127.0.0.1" in outcome.reply for outcome in outcomes)
    smtp.start()
    assert [outcome.state for outcome in send_due()] == [State.SENT, State.SENT]
    assert sorted(r.recipients[0] for r in smtp.received) == ["ada@example.org", "bo@example.org"]
    assert {r.message_id for r in smtp.received} == set(Mail.objects.values_list("message_id", flat=True))


def test_a_slow_server_times_out_and_is_retried_behind_the_others(smtp, settings):
    settings.NIGHTJAR_SMTP_TIMEOUT = 0.3
    settings.NIGHTJAR_MAIL_RETRY_SECONDS = 60
    register_guest(name="Slow", email="slow@example.org")
    drain()
    smtp.rules.delay = 1.0
    [outcome] = send_due()
    assert outcome.state == State.RETRYING and "timed out" in outcome.reply
    register_guest(name="Next", email="next@example.org")
    drain()
    smtp.rules.delay = 0
    assert [outcome.mail.address for outcome in send_due()] == ["next@example.org"]  # the retry waits its turn


def test_a_server_that_answers_each_line_just_in_time_still_lets_go_of_the_sender(smtp, settings):
    settings.NIGHTJAR_SMTP_TIMEOUT = 0.4  # each answer comes in 0.3 s; four of them are more than 3 x 0.4
    register_guest(name="Ada", email="ada@example.org")
    drain()
    smtp.rules.step_delay = 0.3
    [outcome] = send_due()
    assert outcome.state == State.RETRYING and smtp.received == []
    assert outcome.reply == f"The mail server 127.0.0.1:{smtp.port} took longer than 1.2 s for one mail"
    smtp.rules.step_delay = 0
    assert [o.state for o in send_due()] == [State.SENT]


def test_temporary_refusals_end_in_failed_after_the_bound(smtp, settings):
    settings.NIGHTJAR_MAIL_ATTEMPTS = 3
    register_guest(name="Ada", email="ada@example.org")
    drain()
    smtp.rules.rcpt["*"] = "452 4.2.2 Mailbox full"
    states = [send_due()[0].state for _ in range(3)]
    assert states == [State.RETRYING, State.RETRYING, State.FAILED]
    mail = Mail.objects.get()
    assert mail.last_reply == "Gave up after 3 attempts: 452 4.2.2 Mailbox full" and send_due() == []


def test_a_claim_held_by_a_dead_sender_comes_back_after_its_lease(smtp, settings):
    settings.NIGHTJAR_MAIL_LEASE_SECONDS = 60
    register_guest(name="Ada", email="ada@example.org")
    drain()
    [claimed] = sender.claim_due()  # ...and this sender dies before sending
    assert sender.claim_due() == []  # nobody else takes it while the lease runs
    Mail.objects.update(next_attempt=claimed.next_attempt)  # the lease ran out
    [outcome] = send_due()
    assert (outcome.state, outcome.mail.attempts) == (State.SENT, 2)


def test_without_a_mail_server_mails_are_written_as_files(settings, tmp_path):
    settings.NIGHTJAR_SMTP_HOST = ""
    settings.NIGHTJAR_MAIL_DIR = tmp_path / "mail"
    guest = register_guest(name="Ada", email="ada@example.org")
    drain()
    [outcome] = send_due()
    [path] = (tmp_path / "mail").iterdir()
    assert outcome.state == State.SENT and outcome.reply == f"Written to {path}"
    assert path.name == f"{guest.code}-ticket-{outcome.mail.pk}.eml"
    assert f"Message-ID: {outcome.mail.message_id}".encode() in path.read_bytes()


def test_the_form_takes_an_optional_address_validated_as_django_validates_email(client):
    page = client.get(reverse("evening"))
    assert b'type="email"' in page.content and b"E-mail (optional)" in page.content
    key = page.context["form"]["submission_key"].value()
    refused = client.post(reverse("evening"), {"name": "Ada", "email": "not an address", "submission_key": key})
    assert refused.status_code == 200 and b"Please enter an e-mail address" in refused.content
    assert Registration.objects.count() == 0
    key = refused.context["form"].data["submission_key"]
    client.post(reverse("evening"), {"name": "Ada", "email": "ada@example.org", "submission_key": key})
    client.post(reverse("evening"), {"name": "Bo", "email": "", "submission_key": "another-key"})
    assert list(Registration.objects.values_list("name", "email")) == [("Ada", "ada@example.org"), ("Bo", "")]


def test_the_guests_page_shows_the_address_and_whether_the_mail_went_out(client, smtp):
    guest = register_guest(name="Ada", email="ada@example.org")
    page = reverse("registration", args=[guest.code, guest.secret])
    assert b"Mail for this registration goes to <strong>ada@example.org</strong>" in client.get(page).content
    drain()
    assert "Your ticket: about to be sent." in client.get(page).content.decode()
    smtp.rules.rcpt["*"] = "550 5.1.1 Mailbox unavailable"
    send_due()
    assert "Your ticket: could not be delivered: the mail server said “550 5.1.1 Mailbox unavailable”." in (
        client.get(page).content.decode()
    )
    plain = register_guest(name="Bo")
    assert (
        b"Mail for this registration"
        not in client.get(reverse("registration", args=[plain.code, plain.secret])).content
    )


def test_a_lease_shorter_than_one_attempt_is_a_warning(settings):
    from mail.checks import lease_outlasts_an_attempt

    settings.NIGHTJAR_SMTP_TIMEOUT, settings.NIGHTJAR_MAIL_LEASE_SECONDS = 10, 120
    assert lease_outlasts_an_attempt(None) == []
    settings.NIGHTJAR_MAIL_LEASE_SECONDS = 40  # four waits of 10 s
    assert [warning.id for warning in lease_outlasts_an_attempt(None)] == ["mail.W003"]


OUTBOX = "/admin/mail/mail/"


def failed_ticket_mail(smtp) -> Mail:
    guest = register_guest(name="Ada Bounce", email="ada@example.org")
    drain()
    smtp.rules.rcpt["*"] = "550 5.1.1 Mailbox unavailable"
    send_due()
    smtp.rules.rcpt.clear()
    return guest.mails.get()


def test_staff_resend_a_failed_mail_after_a_plan_with_a_trail(staff, smtp):
    from tickets.models import StaffAction

    failed = failed_ticket_mail(smtp)
    plan = staff.post(OUTBOX, {"action": "resend", "_selected_action": [failed.pk]}).content.decode()
    assert "Yes, send again" in plan
    assert f"{failed.registration.code}: your ticket again to ada@example.org (the last one failed: 550 5.1.1" in plan
    assert Mail.objects.count() == 1  # nothing changed yet
    done = staff.post(OUTBOX, {"action": "resend", "_selected_action": [failed.pk], "confirm": "resend"}, follow=True)
    assert "your ticket stored again for ada@example.org" in done.content.decode()
    new = Mail.objects.exclude(pk=failed.pk).get()
    assert (new.kind, new.state, new.address) == (Kind.TICKET, State.WAITING, "ada@example.org")
    assert new.message_id != failed.message_id and Mail.objects.get(pk=failed.pk).state == State.FAILED
    trail = StaffAction.objects.get(action="resend mail")
    assert trail.actor == "desk (admin)" and trail.registration_id == failed.registration_id
    # Still being sent: refused with its reason, nothing stored.
    again = staff.post(OUTBOX, {"action": "resend", "_selected_action": [new.pk]}).content.decode()
    assert "None of the selected mails can be sent again." in again
    assert f"{failed.registration.code}&#x27;s your ticket mail is still being sent (waiting)." in again
    assert [outcome.state for outcome in send_due()] == [State.SENT] and Mail.objects.count() == 2


def test_a_resend_without_its_permission_changes_nothing(client, smtp):
    from django.contrib.auth.models import Permission, User

    failed = failed_ticket_mail(smtp)
    clerk = User.objects.create_user("clerk", password="x", is_staff=True)
    clerk.user_permissions.add(*Permission.objects.filter(codename__in=["view_mail", "view_registration"]))
    client.force_login(clerk)
    listing = client.get(OUTBOX).content.decode()
    assert "Send again" not in listing and "550 5.1.1 Mailbox unavailable" in listing
    forged = {"action": "resend", "_selected_action": [failed.pk], "confirm": "resend"}
    client.post(OUTBOX, forged, follow=True)
    assert Mail.objects.count() == 1
    clerk.user_permissions.add(Permission.objects.get(codename="resend_mail"))
    clerk = User.objects.get(pk=clerk.pk)  # permissions are cached per user object
    client.force_login(clerk)
    client.post(OUTBOX, forged, follow=True)
    assert Mail.objects.count() == 2


def test_the_registration_page_and_the_desk_show_the_mails(staff, smtp):
    failed = failed_ticket_mail(smtp)
    page = staff.get(f"/admin/tickets/registration/{failed.registration_id}/change/").content.decode()
    assert "mails to the guest" in page.lower() and "550 5.1.1 Mailbox unavailable" in page
    desk = staff.get(reverse("admin:tickets_delivery_status")).content.decode()
    assert "Mail to guests" in desk
    assert '<span class="desk-number">1</span> failed' in desk
    assert '<th scope="row">your ticket</th><td>0</td><td>0</td><td>0</td><td>1</td>' in desk


def test_the_desk_metrics_count_the_outbox_and_the_sender_counts_its_attempts(staff, smtp):
    from mail.metrics import ATTEMPTS
    from tests.test_desk import samples

    failed_ticket_mail(smtp)
    register_guest(name="Bo", email="bo@example.org")
    drain()
    after = samples(staff.get("/metrics").content.decode())
    assert after[("nightjar_mails", (("kind", "ticket"), ("state", "failed")))] == 1
    assert after[("nightjar_mails", (("kind", "ticket"), ("state", "waiting")))] == 1
    before = ATTEMPTS.labels("ticket", "sent")._value.get()
    send_due()
    assert ATTEMPTS.labels("ticket", "sent")._value.get() == before + 1


def test_an_internationalised_domain_is_sent_in_its_ascii_form(smtp):
    guest = register_guest(name="Ana", email="ana@bücher.example")
    drain()
    [outcome] = send_due()
    assert outcome.state == State.SENT
    [received] = smtp.received
    assert received.recipients == ["ana@xn--bcher-kva.example"] and guest.mails.get().state == State.SENT


def test_a_mail_the_sender_cannot_handle_fails_alone_and_one_that_kills_every_sender_is_bounded(
    smtp, settings, monkeypatch
):
    settings.NIGHTJAR_MAIL_ATTEMPTS = 2
    for name in ("Ada", "Bo"):
        register_guest(name=name, email=f"{name.lower()}@example.org")
    drain()
    real = sender.transmit

    def broken_for_ada(mail, data):
        if mail.address == "ada@example.org":
            raise RuntimeError("a bug in the sender")
        return real(mail, data)

    monkeypatch.setattr(sender, "transmit", broken_for_ada)
    outcomes = send_due()
    assert [o.state for o in outcomes] == [State.RETRYING, State.SENT]
    assert outcomes[0].reply == "Could not send the mail: RuntimeError: a bug in the sender"
    # A sender that dies on it every time (claimed, never recorded): failed once out of attempts.
    [claimed] = sender.claim_due()
    Mail.objects.filter(pk=claimed.pk).update(next_attempt=claimed.next_attempt.replace(year=2000))
    assert sender.claim_due() == []
    ada = Mail.objects.get(address="ada@example.org")
    assert ada.state == State.FAILED and ada.last_reply.startswith("Gave up after 2 attempts: the sender stopped")


def test_the_labs_reset_takes_a_guests_mails_with_the_registration():
    from tickets.services.demo import reset_demo, seed_demo

    seed_demo()
    register_guest(name="Lab Guest", email="learner@example.org")
    drain()
    assert Mail.objects.count() == 1
    assert reset_demo() == 1  # (a mail's registration was protected: the reset failed with ProtectedError)
    assert Mail.objects.count() == 0 and list(Registration.objects.values_list("pk", flat=True)) == [1]
