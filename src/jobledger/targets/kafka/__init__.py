"""The Kafka target: pure rules (`rules`), the record (`record`), appends into aiokafka's
accumulator (`append`) and the producer (`target`)."""
