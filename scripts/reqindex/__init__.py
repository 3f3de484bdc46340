"""The parts of scripts/requirements_index.py: citations, definitions, the doc."""
