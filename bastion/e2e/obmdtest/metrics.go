package obmdtest

import (
	"strconv"
	"strings"
)

// MetricSample is the value of series (name and labels, as written) in a
// Prometheus text exposition.
func MetricSample(exposition, series string) (float64, bool) {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}
