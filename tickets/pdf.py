"""The downloadable ticket: one A5 page drawn with reportlab, with a QR code
from segno that encodes the ticket's own secret (what a door scanner checks).

Names may be in any script. DejaVu Sans (Debian's fonts-dejavu-core) covers
Latin, Greek and Cyrillic; WenQuanYi Zen Hei (fonts-wqy-zenhei) covers CJK.
Each name is drawn in the first font that has every one of its characters;
if none has them all, the font with the most, so a rare character is the only
thing that can go missing, never the whole name.
"""

import io
from functools import cache
from pathlib import Path

import segno
from reportlab.lib.pagesizes import A5
from reportlab.lib.units import mm
from reportlab.lib.utils import ImageReader
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.pdfgen import canvas

from tickets.models import Ticket

EVENT = "Nightjar Print Studio: The evening"
FONT_FILES = [
    ("DejaVuSans", Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"), {}),
    ("WenQuanYiZenHei", Path("/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc"), {"subfontIndex": 0}),
]
FALLBACK = "Helvetica"  # reportlab's built-in: Latin-1 only, used when no font file is installed


@cache
def fonts() -> list[tuple[str, frozenset[int]]]:
    """Registered fonts with the characters each one covers."""
    loaded = []
    for name, path, options in FONT_FILES:
        if not path.exists():
            continue
        font = TTFont(name, str(path), **options)
        pdfmetrics.registerFont(font)
        loaded.append((name, frozenset(font.face.charToGlyph)))
    return loaded


def font_for(text: str) -> str:
    needed = {ord(ch) for ch in text if not ch.isspace()}
    best, best_missing = FALLBACK, len(needed) + 1
    for name, covered in fonts():
        missing = len(needed - covered)
        if missing < best_missing:
            best, best_missing = name, missing
        if missing == 0:
            break
    return best


def qr_payload(ticket: Ticket) -> str:
    return ticket.secret


def render(ticket: Ticket) -> bytes:
    registration = ticket.registration
    buffer = io.BytesIO()
    width, height = A5
    pdf = canvas.Canvas(buffer, pagesize=A5)
    pdf.setTitle(f"Nightjar ticket {ticket.number} for {registration.code}")
    pdf.setAuthor("Nightjar Print Studio")

    label_font = font_for("Registration")
    pdf.setFont(label_font, 13)
    pdf.drawString(15 * mm, height - 20 * mm, EVENT)
    pdf.setLineWidth(1.2)
    pdf.line(15 * mm, height - 24 * mm, width - 15 * mm, height - 24 * mm)

    name_font = font_for(ticket.name)
    size = 22
    while size > 10 and pdfmetrics.stringWidth(ticket.name, name_font, size) > width - 30 * mm:
        size -= 1  # long names shrink to fit the page width
    pdf.setFont(name_font, size)
    pdf.drawString(15 * mm, height - 40 * mm, ticket.name)

    rows = [
        ("Registration", registration.code),
        ("Ticket number", ticket.number),
        ("Issued", f"{ticket.issued:%Y-%m-%d %H:%M} UTC"),
    ]
    y = height - 54 * mm
    for label, value in rows:
        pdf.setFont(label_font, 10)
        pdf.drawString(15 * mm, y, label)
        pdf.setFont(label_font, 13)
        pdf.drawString(50 * mm, y, value)
        y -= 9 * mm

    png = io.BytesIO()
    segno.make(qr_payload(ticket), error="m").save(png, kind="png", scale=8, border=4)
    png.seek(0)
    side = 60 * mm
    pdf.drawImage(ImageReader(png), (width - side) / 2, 25 * mm, side, side)
    pdf.setFont(label_font, 9)
    pdf.drawCentredString(width / 2, 18 * mm, "Show this code at the door. One ticket per registration.")
    pdf.showPage()
    pdf.save()
    return buffer.getvalue()
