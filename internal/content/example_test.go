package content_test

import (
	"fmt"

	"github.com/qunfa/qunfa/internal/content"
)

func ExampleTemplate_Render() {
	tmpl, err := content.Parse("{{name}}，您好！您的订单 {{order}} 已发货。")
	if err != nil {
		panic(err)
	}
	fmt.Println(tmpl.Vars())
	msg, _ := tmpl.Render(map[string]string{"name": "李雷", "order": "A-1001"})
	fmt.Println(msg)
	_, err = tmpl.Render(map[string]string{"name": "韩梅梅"})
	fmt.Println(err)
	// Output:
	// [name order]
	// 李雷，您好！您的订单 A-1001 已发货。
	// missing variable "order"
}
