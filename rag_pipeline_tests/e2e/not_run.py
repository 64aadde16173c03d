"""The commands the docs show that the suite does not run, each with why and which test covers it
instead (test_documented_commands.py fails on a shown command that is neither run nor listed here)."""

GOLDEN_DOC = "docs/golden-set.md"
_WORKSPACE = "shows the worked example's folder, which test_worked_example builds from this output"
_PRIVATE_MACHINES = "needs a container registry and a Kubernetes cluster: another machine"
_VERIFIED_BY_HAND = ("a record of a check made by hand (as root, a server restarted on TCP); "
                     "e2e/test_parallel_backfill.py runs Dagster's instance from deploy/dagster-postgres.yaml on PostgreSQL")
# Shown in a shell block, not run here: why, and which test covers it.
NOT_RUN = {
    ("README.md", "make demo"): "creates .venv and installs from PyPI, then runs `rag-pipeline demo`: "
                                "test_the_command_line_synopsis runs that",
    ("README.md", "make test"): "the test suite itself, this file included",
    ("README.md", "dagster dev -m rag_pipeline.definitions"): "a server that runs until stopped: "
        "test_readme_own_corpus_in_five_steps loads the same definitions in the same environment "
        "(`dagster definitions validate`), e2e/test_ui_graphql.py runs the webserver and daemon it starts",
    (GOLDEN_DOC, "find skiff -type f | sort"): _WORKSPACE,
    (GOLDEN_DOC, "cat skiff/docs/lifespan.md"): _WORKSPACE,
    (GOLDEN_DOC, "cat skiff/docs/middleware.md"): _WORKSPACE,
    (GOLDEN_DOC, "head -3 golden.jsonl; grep answerable golden.jsonl"): _WORKSPACE,
    (GOLDEN_DOC, "cat pipeline.yaml"): _WORKSPACE,
    (GOLDEN_DOC, "diff pipeline.yaml pipeline-bm25.yaml"): "test_worked_example writes pipeline-bm25.yaml by this diff",
    (GOLDEN_DOC, "echo $?"): "the exit code of the command before, which test_worked_example asserts",
    (GOLDEN_DOC, "head -6 out/bm25.xml"): "shows the JUnit file, which test_worked_example reads",
    (GOLDEN_DOC, "grep -A3 'testsuite name=\"gate\"' out/bm25.xml"): "shows the JUnit file, which test_worked_example reads",
    **{("deploy/README.md", text): _PRIVATE_MACHINES for text in (
        "docker build -f deploy/Dockerfile -t registry.example.com/data/rag-pipeline:0.1.0 .",
        "docker push registry.example.com/data/rag-pipeline:0.1.0",
        "kubectl create namespace rag",
        "kubectl -n rag create secret generic dagster-postgresql-secret "
        "--from-literal=postgresql-password='<dagster role password>'",
        "kubectl -n rag create secret generic rag-pipeline-store --from-literal=RAG_PIPELINE_PG_DSN="
        "'postgresql://rag:<password>@store-db.data.svc.cluster.local:5432/rag?sslmode=require'",
        "kubectl -n rag apply -f - <<'EOF'",
        "helm repo add dagster https://dagster-io.github.io/helm",
        "helm repo update",
        "helm upgrade --install rag-pipeline dagster/dagster --version 1.13.27 --namespace rag -f deploy/helm/values.yaml",
        "kubectl -n rag port-forward svc/rag-pipeline-webserver 8080:80")},
    **{("deploy/README.md", text): _VERIFIED_BY_HAND for text in (
        ".venv/bin/python -c \"import pgserver; s=pgserver.get_server('/tmp/pgdeploy', cleanup_mode=None); "
        "print(s.get_uri())\"",
        "runuser -u pgserver -- .venv/lib/python3.11/site-packages/pgserver/pginstall/bin/pg_ctl -D /tmp/pgdeploy "
        "-l /tmp/pgdeploy.log -o \"-h 127.0.0.1 -p 55432 -k /tmp/pgdeploy\" start",
        "mkdir /tmp/dh_verify && cp deploy/dagster-postgres.yaml /tmp/dh_verify/dagster.yaml",
        "export DAGSTER_HOME=/tmp/dh_verify DAGSTER_PG_USERNAME=dagster DAGSTER_PG_PASSWORD=... "
        "DAGSTER_PG_HOST=127.0.0.1 DAGSTER_PG_DB=dagster_verify DAGSTER_PG_PORT=55432",
        ".venv/bin/python -c \"from dagster import DagsterInstance; i=DagsterInstance.get(); "
        "print(i.run_storage, i.event_log_storage)\"",
        ".venv/bin/dagster instance info")},
}
