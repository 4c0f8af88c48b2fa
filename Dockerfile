# One image for web, worker, beat and the collector (docker-compose.yml).
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY webapp ./webapp
COPY collectors ./collectors
# celery-batches declares celery<5.7 (it predates 5.7); see pyproject.toml.
RUN pip install . && pip install --no-deps 'celery-batches==0.11'
COPY manage.py ./
COPY templates ./templates
COPY static ./static
# collectstatic needs settings but no database, broker or cache: offline (webapp/settings.py).
RUN VIGIL_OFFLINE=true VIGIL_DEBUG=false python manage.py collectstatic --noinput
# Web, workers and beat run as this user (the collector service alone asks for root). The
# image has no Chromium: the monthly report's PDF prints on a worker host with Chromium
# installed, as a user other than root, where it runs sandboxed (webapp/energy/report.py
# passes --no-sandbox only to a root process, which Chromium cannot sandbox). Inside Docker
# its sandbox would need user namespaces that the default seccomp profile refuses.
RUN useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin vigil
USER vigil
EXPOSE 8000
