package handlers

import (
	"encoding/json"
	"fmt"

	"github.com/labstack/echo/v4"
)

// jsonSerializer writes JSON without HTML escaping: notifications carry
// <task-notification> markup meant to be read by a model and by people, and
// \u003c would hide it.
type jsonSerializer struct{}

func (jsonSerializer) Serialize(c echo.Context, i any, indent string) error {
	enc := json.NewEncoder(c.Response())
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	return enc.Encode(i)
}

func (jsonSerializer) Deserialize(c echo.Context, i any) error {
	if err := json.NewDecoder(c.Request().Body).Decode(i); err != nil {
		return fmt.Errorf("decode json: %w", err)
	}
	return nil
}
