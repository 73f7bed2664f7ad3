# Nightjar's one image: the web service (gunicorn) and the worker run from it.
FROM python:3.11-slim-bookworm

# Fonts for the PDF tickets (Latin, Greek, Cyrillic, CJK).
RUN apt-get update \
    && apt-get install -y --no-install-recommends fonts-dejavu-core fonts-wqy-zenhei fonts-lohit-deva \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
# Hashed static files, served by whitenoise (debug only for this step: no key in the image).
RUN DJANGO_DEBUG=1 python manage.py collectstatic --noinput -v 0

RUN useradd --system --uid 10001 nightjar
USER nightjar
# All interfaces inside the container, for the proxy in front; publish the
# port on loopback or a private network only (docs/deploy.md, "The proxy in front").
ENV PYTHONUNBUFFERED=1 GUNICORN_BIND=0.0.0.0:8000
EXPOSE 8000
CMD ["gunicorn", "nightjar.wsgi", "-c", "gunicorn.conf.py"]
