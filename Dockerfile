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
EXPOSE 8000
