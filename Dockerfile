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
# collectstatic needs settings but no database: point at placeholders.
RUN VIGIL_DEBUG=false SECRET_KEY=build-only-placeholder-never-used-at-run-time \
    DATABASE_URL=postgresql://build@localhost/build CELERY_BROKER_URL=redis://localhost \
    python manage.py collectstatic --noinput
EXPOSE 8000
