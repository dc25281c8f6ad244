"""Running Tally: the security headers and refusals, liveness, readiness and metrics, logs, real
`tally serve` processes (slow clients, the network, Docker's start command), the import layers,
that the server never imports torch, and the README's examples."""
