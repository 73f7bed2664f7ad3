"""The PDF ticket: one page, the right words in any script, and a QR code
that decodes to the ticket's own secret."""

import io
import re

import pytest
import zxingcpp
from pypdf import PdfReader

from tickets import contract, pdf
from tickets.models import Registration, Ticket

pytestmark = pytest.mark.fast


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


WIDEST_NAMES = [
    "W" * 100,
    "Ω" * 100,
    "王" * 100,
    "\u0915\u093c" * 100,  # 100 x U+0958 as typed, NFC-expanded
    "A" + "😀" * 49 + "👩\u200d🔬" * 50,
    "Wolfeschlegelsteinhausenbergerdorff " * 2 + "W" * 28,
    "\ufdfa" * 100,
    "𒐫" * 100,
]


def text_positions(data: bytes) -> list[tuple[float, float]]:
    """Where each drawString call starts, in drawing order (from the page's content stream)."""
    content = PdfReader(io.BytesIO(data)).pages[0].get_contents().get_data().decode("latin-1")
    return [(float(x), float(y)) for x, y in re.findall(r"BT 1 0 0 1 ([\d.]+) ([\d.]+) Tm", content)]


@pytest.mark.django_db
@pytest.mark.parametrize("name", WIDEST_NAMES, ids=lambda name: f"{name[:3]}x{len(name)}")
def test_every_glyph_of_the_widest_names_lies_inside_the_page(name):
    from reportlab.lib.pagesizes import A5
    from reportlab.pdfbase import pdfmetrics

    assert contract.clean_name(name) == name
    font, size, lines = pdf.name_layout(name)
    assert "".join(lines).replace(" ", "") == name.replace(" ", "")  # wrapped, nothing dropped
    for line in lines:
        assert pdfmetrics.stringWidth(line, font, size) <= pdf.NAME_WIDTH
    width, height = A5
    positions = text_positions(pdf.render(make_ticket(name)))
    # Drawn in order: the event line, the name's lines, then the rows.
    for line, (x, y) in zip(lines, positions[1 : 1 + len(lines)], strict=True):
        assert x >= pdf.MARGIN - 0.01
        assert x + pdfmetrics.stringWidth(line, font, size) <= width - pdf.MARGIN + 0.01
        assert size < y < height - size
    # The rows below the name stay above the QR code (which ends 85 mm from the bottom).
    name_bottom = positions[len(lines)][1]
    rows = positions[1 + len(lines) : 1 + len(lines) + 6]
    assert all(y < name_bottom - size for _, y in rows)
    assert min(y for _, y in rows) > 85 * 72 / 25.4


@pytest.mark.django_db
def test_a_devanagari_name_is_drawn_in_a_font_that_has_its_letters():
    assert pdf.font_for("\u0915\u093c\u0916") == "LohitDevanagari"
    text = PdfReader(io.BytesIO(pdf.render(make_ticket("कमला दास")))).pages[0].extract_text()
    assert "\x00" not in text  # no missing glyphs
