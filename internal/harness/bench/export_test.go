package bench

// ParseStatCPU exposes parseStatCPU to the external tests.
var ParseStatCPU = parseStatCPU

// ParseStatusRSS exposes parseStatusRSS to the external tests.
var ParseStatusRSS = parseStatusRSS
