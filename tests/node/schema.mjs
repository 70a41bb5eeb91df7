// A tiny JSON Schema validator for the tests: the subset the structured-output tests use
// (type object/array/string/integer/number/boolean/null, properties, required,
// additionalProperties false, items, enum, const, minItems/maxItems, minLength/maxLength,
// minimum/maximum). Written for the tests, independent of the server's grammar compiler.
// Returns a list of error strings (empty: valid).
export function validate(value, schema, path = '$') {
  const errors = [];
  const fail = (msg) => errors.push(`${path}: ${msg}`);
  if (schema === true || schema === undefined) return errors;
  if (schema === false) return [`${path}: no value allowed`];
  const typeOf = (v) => (v === null ? 'null' : Array.isArray(v) ? 'array'
    : Number.isInteger(v) ? 'integer' : typeof v);
  if ('const' in schema && JSON.stringify(value) !== JSON.stringify(schema.const)) fail(`not const ${JSON.stringify(schema.const)}`);
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    fail(`${JSON.stringify(value)} not in enum ${JSON.stringify(schema.enum)}`);
  }
  if (schema.type) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    const t = typeOf(value);
    const ok = types.some((want) => want === t || (want === 'number' && t === 'integer'));
    if (!ok) {
      fail(`type ${t}, expected ${types.join('|')}`);
      return errors;
    }
  }
  const t = typeOf(value);
  if (t === 'object') {
    const props = schema.properties || {};
    for (const r of schema.required || []) if (!(r in value)) fail(`missing required property ${r}`);
    for (const [k, v] of Object.entries(value)) {
      if (k in props) errors.push(...validate(v, props[k], `${path}.${k}`));
      else if (schema.additionalProperties === false) fail(`unexpected property ${k}`);
      else if (typeof schema.additionalProperties === 'object') errors.push(...validate(v, schema.additionalProperties, `${path}.${k}`));
    }
  } else if (t === 'array') {
    if (schema.minItems !== undefined && value.length < schema.minItems) fail(`fewer than ${schema.minItems} items`);
    if (schema.maxItems !== undefined && value.length > schema.maxItems) fail(`more than ${schema.maxItems} items`);
    if (schema.items) value.forEach((v, i) => errors.push(...validate(v, schema.items, `${path}[${i}]`)));
  } else if (t === 'string') {
    const n = [...value].length;
    if (schema.minLength !== undefined && n < schema.minLength) fail(`shorter than ${schema.minLength}`);
    if (schema.maxLength !== undefined && n > schema.maxLength) fail(`longer than ${schema.maxLength}`);
  } else if (t === 'integer' || t === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) fail(`below ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) fail(`above ${schema.maximum}`);
  }
  return errors;
}
