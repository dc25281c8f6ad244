"""What the test folders share: helpers, oracles' configs and models, throw-away servers and
clusters, and the files under fixtures/."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The checkout."""
FIXTURES = ROOT / "tests" / "support" / "fixtures"
"""Files the tests read: real config.json files, and every version's stored results."""
