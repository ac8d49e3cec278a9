"""What the HTTP layer reads for its views: open jobs by keyset, finished jobs from the log,
the dashboard's numbers, live pods, a schedule's runs. Routes and pages render them."""
