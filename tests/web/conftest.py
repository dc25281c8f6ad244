"""The pages as HTML, without a browser, in-process (`api`): each calculator page answers as its
API route does for the same inputs, with the same defaults and the same refusals; the benchmark
and energy pages render stored results. The browser's view is under browser/."""
