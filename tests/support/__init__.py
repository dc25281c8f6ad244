"""What the test folders share: helpers, oracles' configs and models, throw-away servers and
clusters, the files under fixtures/."""
