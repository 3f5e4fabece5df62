// The settings tests' shared fixture: an Application settings_schema with one key of each kind the
// checks tell apart (an enum string, a bounded integer, a boolean).
export const SCHEMA = {
  type: 'object',
  properties: {
    density: { type: 'string', enum: ['compact', 'comfortable'] },
    page_size: { type: 'integer', minimum: 10, maximum: 100 },
    beta: { type: 'boolean' },
  },
};
