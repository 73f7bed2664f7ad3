"""The downloadable ticket: one A5 page drawn with reportlab, with a QR code
from segno that encodes the ticket's own secret (what a door scanner checks).

Names may be in any script. DejaVu Sans (Debian's fonts-dejavu-core) covers
Latin, Greek and Cyrillic; WenQuanYi Zen Hei (fonts-wqy-zenhei) covers CJK;
Lohit Devanagari (fonts-lohit-deva) covers Hindi, Marathi, Nepali. reportlab
does not shape text, so conjuncts show as their parts; emoji have no font.
Each name is drawn in the first font that has every one of its characters;
if none has them all, the font with the most, so a rare character is the only
thing that can go missing, never the whole name.
"""

import io
import re
from functools import cache
from pathlib import Path

import segno
from reportlab.lib.pagesizes import A5
from reportlab.lib.units import mm
from reportlab.lib.utils import ImageReader
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.pdfgen import canvas

from tickets import contract
from tickets.models import Ticket

EVENT = "Nightjar Print Studio: The evening"
FONT_FILES = [
    ("DejaVuSans", Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"), {}),
    ("WenQuanYiZenHei", Path("/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc"), {"subfontIndex": 0}),
    ("LohitDevanagari", Path("/usr/share/fonts/truetype/lohit-devanagari/Lohit-Devanagari.ttf"), {}),
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


MARGIN = 15 * mm
NAME_WIDTH = A5[0] - 2 * MARGIN
NAME_HEIGHT = 34 * mm  # the name's block: room for the rows and the QR code below it
LEADING = 1.2
SINGLE_LINE_SIZES = range(22, 11, -1)
WRAPPED_SIZES = range(16, 5, -1)


def name_layout(name: str) -> tuple[str, int, list[str]]:
    """Font, size and lines for the guest's name: shrink to fit one line down
    to 12 pt; past that, wrap at the largest size whose lines fit the block."""
    font = font_for(name)
    for size in SINGLE_LINE_SIZES:
        if pdfmetrics.stringWidth(name, font, size) <= NAME_WIDTH:
            return font, size, [name]
    for size in WRAPPED_SIZES:
        lines = wrap(name, font, size, NAME_WIDTH)
        if len(lines) * size * LEADING <= NAME_HEIGHT:
            return font, size, lines
    return font, size, lines  # 100 of the widest characters fit at 6 pt; keep the last try regardless


def wrap(text: str, font: str, size: int, width: float) -> list[str]:
    """Break at spaces where possible, inside a word only when it is wider than a line."""

    def fits(candidate: str) -> bool:
        return pdfmetrics.stringWidth(candidate.rstrip(), font, size) <= width

    lines, line = [], ""
    for word in re.findall(r"\S+\s*|\s+", text):
        if fits(line + word):
            line += word
            continue
        if line.strip():
            lines.append(line.rstrip())
            line = ""
        for cluster in contract.clusters(word.lstrip() if not line else word):
            if fits(line + cluster) or not line.strip():
                line += cluster
            else:
                lines.append(line.rstrip())
                line = cluster
    if line.strip():
        lines.append(line.rstrip())
    return lines


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
    pdf.drawString(MARGIN, height - 20 * mm, EVENT)
    pdf.setLineWidth(1.2)
    pdf.line(15 * mm, height - 24 * mm, width - 15 * mm, height - 24 * mm)

    name_font, size, lines = name_layout(ticket.name)
    pdf.setFont(name_font, size)
    y = height - 40 * mm
    for line in lines:
        pdf.drawString(MARGIN, y, line)
        y -= size * LEADING

    rows = [
        ("Registration", registration.code),
        ("Ticket number", ticket.number),
        ("Issued", f"{ticket.issued:%Y-%m-%d %H:%M} UTC"),
    ]
    y = min(height - 54 * mm, y - 6 * mm)  # below the name, however many lines it took
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
