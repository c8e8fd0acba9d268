package bench

// ParseStatCPU exposes parseStatCPU to the external tests.
var ParseStatCPU = parseStatCPU
