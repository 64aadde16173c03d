"""`python -m rag_pipeline`: the `rag-pipeline` command."""

import sys

from rag_pipeline.cli.main import main

sys.exit(main())
