"""The PostgreSQL server helm-values/postgresql.yaml's release uses, on the simulated
cluster: Debian's PostgreSQL 15 (tests/support/postgres.py's) standing in for the postgres
image, its Deployment and Service, and queries to it from the tests."""

from __future__ import annotations

import pwd

from gpu_reclaim_sim.z2jh import release as z2jh

from .postgres import POSTGRES_BIN

POSTGRES_IMAGE = "docker.io/library/postgres:15"  # Debian's PostgreSQL 15 stands in for it


def postgres_image() -> dict:
    """The image as the simulated cluster runs it: Debian's binaries, as its `postgres` user."""
    user = pwd.getpwnam("postgres")  # Debian's postgresql package's user
    return {"name": POSTGRES_IMAGE, "size": "150MB", "workingDir": "/",
            "user": {"name": "postgres", "uid": user.pw_uid, "gid": user.pw_gid},
            "env": {"PATH": f"{POSTGRES_BIN}:/usr/bin:/bin", "HOME": "/var/lib/postgresql"}}


def postgres_objects(password: str) -> list[dict]:
    """A PostgreSQL server at postgres.jhub.svc:5432 (postgresql.yaml's address): user
    jupyterhub with `password` (scram-sha-256 from anywhere), databases jupyterhub and
    gpu_reclaim (as the variant's comment tells the admin to create)."""
    script = """set -e
export PGDATA=/var/lib/postgresql/data
printf '%s' "$POSTGRES_PASSWORD" > /tmp/pw
initdb -U jupyterhub --pwfile=/tmp/pw --auth-local=trust --auth-host=scram-sha-256 >/dev/null
echo 'host all all 0.0.0.0/0 scram-sha-256' >> $PGDATA/pg_hba.conf
printf 'CREATE DATABASE jupyterhub;\\nCREATE DATABASE gpu_reclaim;\\n' | postgres --single -D $PGDATA postgres >/dev/null
exec postgres -D $PGDATA -c listen_addresses='*' -k /tmp"""
    labels = {"app": "postgres"}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "postgres"},
         "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
             "containers": [{"name": "postgres", "image": POSTGRES_IMAGE, "command": ["sh", "-c", script],
                             "env": [{"name": "POSTGRES_PASSWORD", "value": password}],
                             "ports": [{"containerPort": 5432, "name": "postgres"}],
                             "volumeMounts": [{"name": "data", "mountPath": "/var/lib/postgresql"}]}],
             "volumes": [{"name": "data", "emptyDir": {}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "postgres"},
         "spec": {"selector": labels, "ports": [{"port": 5432, "targetPort": "postgres"}]}},
    ]


def rows(release: z2jh.Release, password: str, database: str, query: str) -> list[tuple]:
    """`query`'s rows in the release's PostgreSQL server (at its Service's cluster IP)."""
    import psycopg2

    host = release.kubectl("get", "service", "postgres", "-o", "jsonpath={.spec.clusterIP}")
    connection = psycopg2.connect(host=host, user="jupyterhub", password=password, dbname=database,
                                  connect_timeout=10)
    try:
        with connection.cursor() as cursor:
            cursor.execute(query)
            return cursor.fetchall()
    finally:
        connection.close()
