package decode

import "github.com/dispatchhq/dispatch"

// AlertDestination validates a create body: name, kind (webhook or
// slack), url (as a job's targetUrl) and, for a webhook, credentialsId
// (whose allowedTargets the store checks against url).
func AlertDestination(body []byte, rules dispatch.JobRules) (*dispatch.AlertDestination, error) {
	fields, p := decodeObject(body)
	if fields == nil {
		return nil, p.Err()
	}
	for k := range fields {
		switch k {
		case "name", "kind", "url", "credentialsId":
		default:
			p.Add(k, "unknown field")
		}
	}
	d := fieldDecoder{fields: fields, p: &p}
	dest := &dispatch.AlertDestination{Name: d.str("name", 200, true), Kind: d.str("kind", 16, true), URL: d.str("url", dispatch.MaxURLLen, true)}
	if dest.URL != "" {
		rules.CheckTarget(&p, "url", dest.URL)
	}
	if d.present("credentialsId") {
		if id, ok := credentialsID(d.fields); ok {
			dest.CredentialsID = id
		} else {
			p.Add("credentialsId", "must be a credentials id")
		}
	}
	dispatch.CheckAlertKind(&p, dest.Kind, d.present("credentialsId"))
	if err := p.Err(); err != nil {
		return nil, err
	}
	return dest, nil
}
