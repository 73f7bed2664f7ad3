"""The PDF ticket: one page, the right words in any script, and a QR code
that decodes to the ticket's own secret."""

import io

import pytest
import zxingcpp
from pypdf import PdfReader

from tickets import pdf
from tickets.models import Registration, Ticket


def make_ticket(name: str) -> Ticket:
    registration = Registration.objects.create(name=name)
    return Ticket.objects.create(registration=registration, name=name)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "name", ["Ada Lovelace", "Zoë Ñúñez-Ørsted", "Светлана Иванова", "王小明", "Ελένη Παπαδοπούλου"]
)
def test_the_pdf_names_the_event_id_guest_and_ticket_number_in_any_script(name):
    ticket = make_ticket(name)
    reader = PdfReader(io.BytesIO(pdf.render(ticket)))
    assert len(reader.pages) == 1
    text = reader.pages[0].extract_text()
    assert "The evening" in text
    assert ticket.registration.code in text
    assert ticket.number in text
    assert name in text


@pytest.mark.django_db
def test_the_qr_code_decodes_to_the_tickets_secret():
    ticket = make_ticket("Door Check")
    page = PdfReader(io.BytesIO(pdf.render(ticket))).pages[0]
    [image] = page.images
    [code] = zxingcpp.read_barcodes(image.image)
    assert code.text == ticket.secret


def test_names_get_a_font_that_covers_them():
    assert pdf.font_for("Светлана") == "DejaVuSans"
    assert pdf.font_for("王小明") == "WenQuanYiZenHei"
    # Mixed scripts: the font that covers the most, never a crash.
    assert pdf.font_for("Ada 王") in {"DejaVuSans", "WenQuanYiZenHei"}


@pytest.mark.django_db
def test_a_name_with_markup_is_drawn_as_text():
    ticket = make_ticket("<script>alert(1)</script>")
    text = PdfReader(io.BytesIO(pdf.render(ticket))).pages[0].extract_text()
    assert "<script>alert(1)</script>" in text
