package main

import (
	"fmt"
	"reflect"

	hcl "github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"

	"interop/gen/hclspecpb"
)

// stdlibFuncs are the functions a Nomad agent offers both to spec literals and
// to templates in plugin config strings.
func stdlibFuncs() map[string]function.Function {
	return map[string]function.Function{
		"abs":        stdlib.AbsoluteFunc,
		"coalesce":   stdlib.CoalesceFunc,
		"concat":     stdlib.ConcatFunc,
		"hasindex":   stdlib.HasIndexFunc,
		"int":        stdlib.IntFunc,
		"jsondecode": stdlib.JSONDecodeFunc,
		"jsonencode": stdlib.JSONEncodeFunc,
		"length":     stdlib.LengthFunc,
		"lower":      stdlib.LowerFunc,
		"max":        stdlib.MaxFunc,
		"min":        stdlib.MinFunc,
		"reverse":    stdlib.ReverseFunc,
		"strlen":     stdlib.StrlenFunc,
		"substr":     stdlib.SubstrFunc,
		"upper":      stdlib.UpperFunc,
	}
}

func specError(summary, detail string) hcl.Diagnostics {
	return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: summary, Detail: detail}}
}

// convertSpec builds the hcldec spec a Nomad agent builds from a plugin's
// ConfigSchema: object keys name the attributes and blocks beneath them
// unless those carry a name of their own; type strings and literals are HCL
// expressions.
func convertSpec(s *hclspecpb.Spec) (hcldec.Spec, hcl.Diagnostics) {
	if s == nil {
		return nil, specError("nil spec given", "Can not convert a nil specification. Pass a valid spec")
	}
	return convertNode(s, "")
}

func convertNode(s *hclspecpb.Spec, implied string) (hcldec.Spec, hcl.Diagnostics) {
	switch b := s.Block.(type) {
	case *hclspecpb.Spec_Object:
		var diags hcl.Diagnostics
		out := hcldec.ObjectSpec{}
		for key, child := range b.Object.GetAttributes() {
			sub, d := convertNode(child, key)
			diags = append(diags, d...)
			out[key] = sub
		}
		return out, diags
	case *hclspecpb.Spec_Array:
		var diags hcl.Diagnostics
		out := hcldec.TupleSpec{}
		for _, child := range b.Array.GetValues() {
			sub, d := convertNode(child, "")
			diags = append(diags, d...)
			out = append(out, sub)
		}
		return out, diags
	case *hclspecpb.Spec_Attr:
		ty, diags := typeExpr(b.Attr.GetType())
		if diags.HasErrors() {
			return nil, diags
		}
		name := pick(b.Attr.GetName(), implied)
		if name == "" {
			return nil, append(diags, specError("Missing name in attribute spec",
				"The name attribute is required, to specify the attribute name that is expected in an input HCL file.")...)
		}
		return &hcldec.AttrSpec{Name: name, Type: ty, Required: b.Attr.GetRequired()}, diags
	case *hclspecpb.Spec_BlockValue:
		nested, diags := convertNested(b.BlockValue.GetNested())
		return &hcldec.BlockSpec{
			TypeName: pick(b.BlockValue.GetName(), implied),
			Nested:   nested,
			Required: b.BlockValue.GetRequired(),
		}, diags
	case *hclspecpb.Spec_BlockAttrs:
		ty, diags := typeExpr(b.BlockAttrs.GetType())
		if diags.HasErrors() {
			return nil, diags
		}
		name := pick(b.BlockAttrs.GetName(), implied)
		if name == "" {
			return nil, append(diags, specError("Missing name in block_attrs spec",
				"The name attribute is required, to specify the block attr name that is expected in an input HCL file.")...)
		}
		return &hcldec.BlockAttrsSpec{TypeName: name, ElementType: ty, Required: b.BlockAttrs.GetRequired()}, diags
	case *hclspecpb.Spec_BlockList:
		nested, diags := convertNested(b.BlockList.GetNested())
		name := pick(b.BlockList.GetName(), implied)
		if name == "" {
			return nil, append(diags, specError("Missing name in block_list spec",
				"The name attribute is required, to specify the block type name that is expected in an input HCL file.")...)
		}
		return &hcldec.BlockListSpec{
			TypeName: name, Nested: nested,
			MinItems: int(b.BlockList.GetMinItems()), MaxItems: int(b.BlockList.GetMaxItems()),
		}, diags
	case *hclspecpb.Spec_BlockSet:
		nested, diags := convertNested(b.BlockSet.GetNested())
		name := pick(b.BlockSet.GetName(), implied)
		if name == "" {
			return nil, append(diags, specError("Missing name in block_set spec",
				"The name attribute is required, to specify the block type name that is expected in an input HCL file.")...)
		}
		return &hcldec.BlockSetSpec{
			TypeName: name, Nested: nested,
			MinItems: int(b.BlockSet.GetMinItems()), MaxItems: int(b.BlockSet.GetMaxItems()),
		}, diags
	case *hclspecpb.Spec_BlockMap:
		nested, diags := convertNested(b.BlockMap.GetNested())
		name := pick(b.BlockMap.GetName(), implied)
		if name == "" {
			return nil, append(diags, specError("Missing name in block_map spec",
				"The name attribute is required, to specify the block type name that is expected in an input HCL file.")...)
		}
		if len(b.BlockMap.GetLabels()) < 1 {
			return nil, append(diags, specError("Invalid block label name list",
				"A block_map must have at least one label specified.")...)
		}
		return &hcldec.BlockMapSpec{TypeName: name, LabelNames: b.BlockMap.GetLabels(), Nested: nested}, diags
	case *hclspecpb.Spec_Default:
		primary, diags := convertNode(b.Default.GetPrimary(), "")
		if diags.HasErrors() {
			return nil, diags
		}
		def, more := convertNode(b.Default.GetDefault(), "")
		diags = append(diags, more...)
		if diags.HasErrors() {
			return nil, diags
		}
		return &hcldec.DefaultSpec{Primary: primary, Default: def}, diags
	case *hclspecpb.Spec_Literal:
		expr, diags := hclsyntax.ParseExpression([]byte(b.Literal.GetValue()), "proto", hcl.Pos{})
		if diags.HasErrors() {
			return nil, diags
		}
		val, more := expr.Value(&hcl.EvalContext{Functions: stdlibFuncs()})
		diags = append(diags, more...)
		if diags.HasErrors() {
			return nil, diags
		}
		return &hcldec.LiteralSpec{Value: val}, diags
	}
	return nil, specError("Invalid spec block", fmt.Sprintf("Blocks of type %T are not expected here.", s.Block))
}

func convertNested(s *hclspecpb.Spec) (hcldec.Spec, hcl.Diagnostics) {
	if s == nil {
		return nil, specError("Missing spec block",
			"A block spec must have exactly one child spec specifying how to decode block contents.")
	}
	return convertNode(s, "")
}

func pick(name, implied string) string {
	if name != "" {
		return name
	}
	return implied
}

// Type expressions are evaluated as HCL expressions in which the primitive
// type names are variables and list/set/map/tuple/object are functions; the
// values are types carried in a capsule.
var typeCapsule = cty.Capsule("type", reflect.TypeOf(cty.NilType))

func typeVal(t cty.Type) cty.Value { return cty.CapsuleVal(typeCapsule, &t) }

func valType(v cty.Value) cty.Type { return *(v.EncapsulatedValue().(*cty.Type)) }

func collectionFunc(make func(cty.Type) cty.Type) function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{Name: "element_type", Type: typeCapsule}},
		Type:   function.StaticReturnType(typeCapsule),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			return typeVal(make(valType(args[0]))), nil
		},
	})
}

var typeContext = &hcl.EvalContext{
	Variables: map[string]cty.Value{
		"string": typeVal(cty.String),
		"number": typeVal(cty.Number),
		"bool":   typeVal(cty.Bool),
		"any":    typeVal(cty.DynamicPseudoType),
	},
	Functions: map[string]function.Function{
		"list": collectionFunc(cty.List),
		"set":  collectionFunc(cty.Set),
		"map":  collectionFunc(cty.Map),
		"tuple": function.New(&function.Spec{
			Params: []function.Parameter{{Name: "element_types", Type: cty.List(typeCapsule)}},
			Type:   function.StaticReturnType(typeCapsule),
			Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
				var elems []cty.Type
				for it := args[0].ElementIterator(); it.Next(); {
					_, v := it.Element()
					elems = append(elems, valType(v))
				}
				return typeVal(cty.Tuple(elems)), nil
			},
		}),
		"object": function.New(&function.Spec{
			Params: []function.Parameter{{Name: "attribute_types", Type: cty.Map(typeCapsule)}},
			Type:   function.StaticReturnType(typeCapsule),
			Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
				attrs := map[string]cty.Type{}
				for it := args[0].ElementIterator(); it.Next(); {
					k, v := it.Element()
					attrs[k.AsString()] = valType(v)
				}
				return typeVal(cty.Object(attrs)), nil
			},
		}),
	},
}

func typeExpr(text string) (cty.Type, hcl.Diagnostics) {
	expr, diags := hclsyntax.ParseExpression([]byte(text), "proto", hcl.Pos{})
	if diags.HasErrors() {
		return cty.NilType, diags
	}
	val, more := expr.Value(typeContext)
	diags = append(diags, more...)
	if diags.HasErrors() {
		return cty.NilType, diags
	}
	if !val.Type().Equals(typeCapsule) {
		return cty.NilType, append(diags, specError("Invalid type expression",
			fmt.Sprintf("A type is required, not %s.", val.Type().FriendlyName()))...)
	}
	return valType(val), diags
}
