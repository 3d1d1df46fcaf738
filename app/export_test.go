package app

// ScrapeSample reads one sample from a /metrics endpoint, for the tests.
var ScrapeSample = scrapeSample
