"""Speed: latency, throughput, start-up and scale of every stage."""
